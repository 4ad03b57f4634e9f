//! Keys from key pairs, so that no secret is copied between hosts.
//!
//! Each host holds a [`PrivateKey`] of its own (X25519) and knows each peer by its
//! [`PublicKey`]. The [`Key`] two hosts seal their packets with is derived from one's
//! private key and the other's public key: both compute the same X25519 shared secret
//! (a static Diffie-Hellman, as WireGuard's static-static part), and [`pair_key`]
//! hashes it, with both public keys, into a key (BLAKE3's key derivation under a
//! context string of its own). A host that is stolen gives away the keys of its own
//! pairs and no other, and a peer is added by its public key alone.
//!
//! The derived key is an ordinary [`Key`]: the wire, the schemes and the replay
//! windows are as with a key file. So a rotation works the same way: a next key opens
//! packets but seals none (see mgrpd's guide).

use std::fmt;
use std::str::FromStr;

use crate::auth::{KEY_LEN, Key, hex_of, key_bytes};

/// The context of the key derivation: the application and what the key is for.
const CONTEXT: &str = "mgrp 2026-11 pair key from X25519 static keys, v1";

/// A host's own X25519 private key. Its `Debug` form never shows the bytes.
#[derive(Clone)]
pub struct PrivateKey(x25519_dalek::StaticSecret);

/// A host's X25519 public key, which its peers name it by.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; KEY_LEN]);

/// Why a key pair gives no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    /// Neither 64 hex digits nor 44 characters of base64.
    #[error(
        "a private or public key is 32 bytes written as 64 hex digits or 44 characters of base64 (make a private key with `mgrpd genkey --private`, its public key with `mgrpd pubkey`); got {0} characters"
    )]
    Format(usize),
    /// A public key of low order: every private key gives the same shared secret
    /// with it, so it would seal nothing.
    #[error("the public key is not a usable X25519 key (the shared secret is zero)")]
    Weak,
    /// The peer's public key is this host's own.
    #[error("the peer's public key is this host's own: each host needs a key pair of its own")]
    Own,
}

impl PrivateKey {
    /// The private key of these 32 (random) bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(x25519_dalek::StaticSecret::from(bytes))
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(x25519_dalek::PublicKey::from(&self.0).to_bytes())
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        hex_of(&self.0.to_bytes())
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKey(public {})", self.public())
    }
}

impl FromStr for PrivateKey {
    type Err = PairError;

    fn from_str(s: &str) -> Result<Self, PairError> {
        key_bytes(s)
            .map(Self::from_bytes)
            .map_err(PairError::Format)
    }
}

impl PublicKey {
    /// The public key of these bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for PublicKey {
    /// 64 hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex_of(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = PairError;

    fn from_str(s: &str) -> Result<Self, PairError> {
        key_bytes(s).map(Self).map_err(PairError::Format)
    }
}

/// The key this host (`mine`) and the peer whose public key is `theirs` share: the
/// same on both ends, and no other pair's.
pub fn pair_key(mine: &PrivateKey, theirs: &PublicKey) -> Result<Key, PairError> {
    let own = mine.public();
    if own == *theirs {
        return Err(PairError::Own);
    }
    let shared = mine
        .0
        .diffie_hellman(&x25519_dalek::PublicKey::from(theirs.0));
    if !shared.was_contributory() {
        return Err(PairError::Weak);
    }
    // Both public keys, lower first, so that both ends hash the same bytes.
    let (lo, hi) = if own.0 < theirs.0 {
        (own.0, theirs.0)
    } else {
        (theirs.0, own.0)
    };
    let mut material = [0u8; 3 * KEY_LEN];
    material[..KEY_LEN].copy_from_slice(shared.as_bytes());
    material[KEY_LEN..2 * KEY_LEN].copy_from_slice(&lo);
    material[2 * KEY_LEN..].copy_from_slice(&hi);
    Ok(Key::from_bytes(blake3::derive_key(CONTEXT, &material)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private(seed: u8) -> PrivateKey {
        PrivateKey::from_bytes([seed; KEY_LEN])
    }

    #[test]
    fn both_ends_derive_the_same_key_and_no_other_pair_does() {
        let (a, b, c) = (private(1), private(2), private(3));
        let ab = pair_key(&a, &b.public()).unwrap();
        assert_eq!(ab, pair_key(&b, &a.public()).unwrap());
        let ac = pair_key(&a, &c.public()).unwrap();
        let bc = pair_key(&b, &c.public()).unwrap();
        assert_ne!(ab, ac);
        assert_ne!(ab, bc);
        assert_ne!(ac, bc);
        // A holder of C's key learns nothing of A and B's.
        assert_ne!(pair_key(&c, &a.public()).unwrap(), ab);
    }

    #[test]
    fn keys_read_back_as_written_and_the_debug_form_hides_the_private_one() {
        let a = private(7);
        let read: PrivateKey = a.to_hex().parse().unwrap();
        assert_eq!(read.public(), a.public());
        let p: PublicKey = a.public().to_string().parse().unwrap();
        assert_eq!(p, a.public());
        assert!(!format!("{a:?}").contains(&a.to_hex()));
        assert_eq!(
            "abc".parse::<PublicKey>().unwrap_err(),
            PairError::Format(3)
        );
    }

    #[test]
    fn a_weak_or_own_public_key_gives_no_key() {
        let a = private(9);
        assert_eq!(
            pair_key(&a, &PublicKey::from_bytes([0; KEY_LEN])).unwrap_err(),
            PairError::Weak
        );
        assert_eq!(pair_key(&a, &a.public()).unwrap_err(), PairError::Own);
    }

    #[test]
    fn the_derivation_is_fixed() {
        // RFC 7748 §6.1's key pairs: a change of the derivation (context, order,
        // inputs) fails here, as it would fail every mesh of mixed releases.
        let alice: PrivateKey = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"
            .parse()
            .unwrap();
        let bob: PublicKey = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"
            .parse()
            .unwrap();
        assert_eq!(
            alice.public().to_string(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        // RFC 7748's shared secret, then both public keys, lower first.
        let shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
        let mut material = Vec::new();
        material.extend(crate::auth::hex(shared).unwrap());
        material.extend(crate::auth::hex(&alice.public().to_string()).unwrap());
        material.extend(crate::auth::hex(&bob.to_string()).unwrap());
        let want = Key::from_bytes(blake3::derive_key(CONTEXT, &material));
        assert_eq!(pair_key(&alice, &bob).unwrap(), want);
        assert_eq!(
            want.to_hex(),
            "13fe92d9c8f9f1914ee05c686c20b7f3eb9af5a4e24c69351abdfe41d931da79"
        );
    }
}
