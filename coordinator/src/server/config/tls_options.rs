//! The TLS options, checked together.

use super::{InvalidConfig, ServerConfig};
use crate::server::tls::ClientAuth;

impl ServerConfig {
    /// TLS needs a certificate and its key together; client certificates need TLS and a
    /// CA to check them against.
    pub(super) fn validate_tls(&self) -> Result<(), InvalidConfig> {
        let tls = &self.tls;
        match (&tls.cert, &tls.key) {
            (Some(_), None) => {
                return Err(InvalidConfig::new(
                    "tls-key",
                    "must be given with tls-cert: TLS needs the certificate's private key",
                ))
            }
            (None, Some(_)) => {
                return Err(InvalidConfig::new(
                    "tls-cert",
                    "must be given with tls-key: TLS needs the certificate the key belongs to",
                ))
            }
            _ => {}
        }
        if !tls.enabled() {
            if tls.client_ca.is_some() {
                return Err(InvalidConfig::new(
                    "tls-client-ca",
                    "needs tls-cert and tls-key: client certificates are only asked for over TLS",
                ));
            }
            if let Some(auth) = tls.client_auth {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    format!("({auth}) needs tls-cert and tls-key: client certificates are only asked for over TLS"),
                ));
            }
        }
        match (tls.client_auth, &tls.client_ca) {
            (Some(auth @ (ClientAuth::Optional | ClientAuth::Required)), None) => {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    format!("({auth}) needs tls-client-ca, the CA certificates client certificates must chain to"),
                ))
            }
            (Some(ClientAuth::None), Some(_)) => {
                return Err(InvalidConfig::new(
                    "tls-client-auth",
                    "(none) contradicts tls-client-ca: give optional or required, or drop tls-client-ca",
                ))
            }
            _ => {}
        }
        if tls.reload_interval.is_zero() {
            return Err(InvalidConfig::new(
                "tls-reload-interval",
                "must be more than 0",
            ));
        }
        Ok(())
    }
}
