//! The hashing the exchange is made of: PBKDF2, HMAC and SHA-256, and comparison in
//! constant time.

use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};

use super::KEY_LEN;

pub(super) fn decode_key(s: &str) -> Option<[u8; KEY_LEN]> {
    BASE64.decode(s).ok()?.try_into().ok()
}

pub(super) fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; KEY_LEN] {
    let mut out = [0u8; KEY_LEN];
    let iterations = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iterations,
        salt,
        password.as_bytes(),
        &mut out,
    );
    out
}

pub(super) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; KEY_LEN] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), message);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(tag.as_ref());
    out
}

pub(super) fn sha256(data: &[u8]) -> [u8; KEY_LEN] {
    let d = digest::digest(&digest::SHA256, data);
    let mut out = [0u8; KEY_LEN];
    out.copy_from_slice(d.as_ref());
    out
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
