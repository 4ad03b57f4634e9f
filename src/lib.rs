//! Home of the workspace's end-to-end tests (`tests/`), benches (`benches/`) and
//! examples (`examples/`). The library itself is empty: the protocol lives in
//! `mgrp-core`, the daemon in `mgrpd`, the tool API in `mgrp-client`.
