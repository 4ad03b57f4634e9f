//! The workspace's root package: the `demo` and `reproduce` examples the README
//! starts with, the `pktrain` example tool, and the end-to-end test of the paper's
//! experiment. It holds no code of its own: the protocol lives in `mgrp-core`, the
//! daemon in `mgrpd`, the tool API in `mgrp-client`, the bandwidth estimator in
//! `pathload-rs`, the namespace hosts in `mgrp-testbed` and the experiments in
//! `mgrp-experiments`.
