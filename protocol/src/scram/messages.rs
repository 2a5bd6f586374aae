//! The fields of the exchange's messages: the gs2 header, attributes, nonces, the
//! iteration count and usernames (SASLprep and escaping).

use super::{ScramError, MAX_ITERATIONS, MAX_NONCE, MIN_ITERATIONS};

/// Splits the gs2 header (`n,,` or `y,,`) from the bare message.
pub(super) fn split_gs2(message: &str) -> Result<(&str, &str), ScramError> {
    let bare = if let Some(rest) = message.strip_prefix("n,") {
        rest
    } else if let Some(rest) = message.strip_prefix("y,") {
        rest
    } else if message.starts_with("p=") {
        return Err(ScramError::ChannelBinding);
    } else {
        return Err(ScramError::Malformed(
            "the message starts with a gs2 header",
        ));
    };
    let bare = match bare.strip_prefix(',') {
        Some(bare) => bare,
        None if bare.starts_with("a=") => return Err(ScramError::AuthorizationIdentity),
        None => return Err(ScramError::Malformed("the gs2 header ends with ','")),
    };
    Ok((&message[..message.len() - bare.len()], bare))
}

/// The value of `<name>=<value>`.
pub(super) fn field(item: Option<&str>, name: char) -> Result<&str, ScramError> {
    let item = item.ok_or(ScramError::Malformed("a field is missing"))?;
    let mut chars = item.chars();
    if chars.next() != Some(name) || chars.next() != Some('=') {
        return Err(ScramError::Malformed("a field is missing or out of order"));
    }
    Ok(&item[2..])
}

pub(super) fn valid_nonce(nonce: &str) -> bool {
    !nonce.is_empty()
        && nonce.len() <= MAX_NONCE
        && nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

pub(super) fn check_iterations(iterations: u32) -> Result<(), ScramError> {
    if (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        Ok(())
    } else {
        Err(ScramError::Iterations(iterations))
    }
}

pub(super) fn prepare(s: &str, what: &'static str) -> Result<String, ScramError> {
    stringprep::saslprep(s)
        .map(|p| p.into_owned())
        .map_err(|_| ScramError::Prepare(what))
}

/// `saslname` escaping: `,` as `=2C`, `=` as `=3D`.
pub(super) fn escape(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

pub(super) fn unescape(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3);
        match code {
            Some("2C") => out.push(','),
            Some("3D") => out.push('='),
            _ => {
                return Err(ScramError::Malformed(
                    "a username escapes only '=2C' and '=3D'",
                ))
            }
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}
