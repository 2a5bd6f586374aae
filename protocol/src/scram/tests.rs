use super::*;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;

/// RFC 7677 §3's example exchange, byte for byte.
#[test]
fn the_rfc_7677_example() {
    let client = ScramClient::with_nonce("user", "pencil", "rOprNGfwEbeRWgbNEkqO").unwrap();
    assert_eq!(client.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
    let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                        s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    let (client, client_final) = client.handle_server_first(server_first).unwrap();
    assert_eq!(
        client_final,
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
         p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    );
    client
        .verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        .unwrap();
    assert_eq!(
        client.verify("v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
        Err(ScramError::ServerSignature)
    );
}

fn exchange(stored: &StoredCredential, user: &str, password: &str) -> Result<String, ScramError> {
    let client = ScramClient::new(user, password)?;
    let known = stored.clone();
    let (server, server_first) = server_first(
        &client.client_first(),
        |name| (name == "alice").then_some(known),
        b"secret",
    )?;
    let (client, client_final) = client.handle_server_first(&server_first)?;
    let (name, server_final) = server.finish(&client_final)?;
    client.verify(&server_final)?;
    Ok(name)
}

#[test]
fn the_right_password_authenticates_and_a_wrong_one_or_an_unknown_user_does_not() {
    let stored = StoredCredential::generate("s3cret", DEFAULT_ITERATIONS).unwrap();
    assert_eq!(exchange(&stored, "alice", "s3cret").unwrap(), "alice");
    assert_eq!(
        exchange(&stored, "alice", "wrong"),
        Err(ScramError::InvalidProof)
    );
    assert_eq!(
        exchange(&stored, "bob", "s3cret"),
        Err(ScramError::InvalidProof)
    );
}

#[test]
fn an_unknown_user_gets_the_same_salt_every_time() {
    let first = |nonce| {
        let c = ScramClient::with_nonce("nobody", "x", nonce).unwrap();
        let (_, m) = server_first(&c.client_first(), |_| None, b"k").unwrap();
        m.split(',').nth(1).unwrap().to_owned()
    };
    assert_eq!(first("abc"), first("def"));
}

#[test]
fn a_stored_credential_round_trips_its_text_and_refuses_junk() {
    let stored = StoredCredential::derive("pw", b"salt-salt-salt!!", 4096).unwrap();
    let text = stored.to_string();
    assert!(text.starts_with("SCRAM-SHA-256$4096:"), "{text}");
    assert_eq!(text.parse::<StoredCredential>().unwrap(), stored);
    for junk in [
        "",
        "pw",
        "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA",
        "SCRAM-SHA-256$12:c2FsdA==$",
        "SCRAM-SHA-1$4096:c2FsdA==$x:y",
    ] {
        assert!(junk.parse::<StoredCredential>().is_err(), "{junk:?}");
    }
    assert!(!format!("{stored:?}").contains(&BASE64.encode(stored.stored_key)));
}

#[test]
fn malformed_and_unsupported_first_messages_are_refused() {
    let lookup = |_: &str| None;
    for (message, error) in [
        ("p=tls-unique,,n=a,r=x", ScramError::ChannelBinding),
        ("n,a=other,n=a,r=x", ScramError::AuthorizationIdentity),
        (
            "x,,n=a,r=x",
            ScramError::Malformed("the message starts with a gs2 header"),
        ),
        ("n,,n=,r=x", ScramError::Malformed("the username is empty")),
        (
            "n,,n=a=41,r=x",
            ScramError::Malformed("a username escapes only '=2C' and '=3D'"),
        ),
        ("n,,n=a", ScramError::Malformed("a field is missing")),
        (
            "n,,m=ext,n=a,r=x",
            ScramError::Malformed("mandatory extensions are not supported"),
        ),
        (
            "n,,n=a,r=x y",
            ScramError::Malformed("a nonce is printable ASCII without ','"),
        ),
    ] {
        let got = server_first(message, lookup, b"k").map(|_| ());
        assert_eq!(got, Err(error), "{message}");
    }
}

#[test]
fn a_final_message_for_another_exchange_is_refused() {
    let stored = StoredCredential::generate("pw", DEFAULT_ITERATIONS).unwrap();
    let client = ScramClient::new("alice", "pw").unwrap();
    let (server, _) = server_first(&client.client_first(), |_| Some(stored.clone()), b"k").unwrap();
    let other = ScramClient::new("alice", "pw").unwrap();
    let (_, other_first) =
        server_first(&other.client_first(), |_| Some(stored.clone()), b"k").unwrap();
    let (_, replayed) = other.handle_server_first(&other_first).unwrap();
    assert_eq!(server.finish(&replayed), Err(ScramError::Nonce));
}

#[test]
fn a_client_refuses_a_server_that_does_not_extend_its_nonce_or_asks_too_many_iterations() {
    let nonce = |n| ScramClient::with_nonce("a", "pw", n).unwrap();
    assert_eq!(
        nonce("abc")
            .handle_server_first("r=xyz1,s=c2FsdA==,i=4096")
            .err(),
        Some(ScramError::Nonce)
    );
    assert_eq!(
        nonce("abc")
            .handle_server_first("r=abc,s=c2FsdA==,i=4096")
            .err(),
        Some(ScramError::Nonce)
    );
    assert_eq!(
        nonce("abc")
            .handle_server_first("r=abcd,s=c2FsdA==,i=4000000000")
            .err(),
        Some(ScramError::Iterations(4_000_000_000))
    );
}

#[test]
fn usernames_with_commas_and_equals_are_escaped() {
    let stored = StoredCredential::generate("pw", DEFAULT_ITERATIONS).unwrap();
    let client = ScramClient::new("a,b=c", "pw").unwrap();
    assert!(client.client_first().contains("n=a=2Cb=3Dc,"));
    let (server, _) = server_first(&client.client_first(), |_| Some(stored.clone()), b"k").unwrap();
    assert_eq!(server.username(), "a,b=c");
}
