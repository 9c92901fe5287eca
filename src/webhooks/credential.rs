//! Sources authenticated by a credential rather than a signature: `Authorization: Bearer
//! <secret>` (the `database` preset, and `"scheme": "bearer"`) or `Authorization: Basic
//! base64(<user>:<password>)` (`"scheme": "basic"`, the secret written `user:password`). Each
//! configured secret is accepted (rotation); the comparison is constant-time over the whole
//! header value, so neither the length of a match nor where it failed shows.

use base64::Engine as _;
use subtle::ConstantTimeEq;

use super::VerifyError;

/// The header both schemes use.
pub const HEADER: &str = "authorization";

/// Which credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `Bearer <secret>`.
    Bearer,
    /// `Basic base64(<user>:<password>)`.
    Basic,
}

impl Credential {
    /// The `Authorization` value a sender puts for `secret`.
    pub fn header_value(self, secret: &str) -> String {
        match self {
            Self::Bearer => format!("Bearer {secret}"),
            Self::Basic => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(secret.as_bytes())
            ),
        }
    }

    /// Checks the `Authorization` value (`None`: absent) against every secret.
    pub fn verify(self, value: Option<&str>, secrets: &[String]) -> Result<(), VerifyError> {
        if secrets.is_empty() {
            return Err(VerifyError::NoSecrets);
        }
        let value = value
            .filter(|v| !v.is_empty())
            .ok_or(VerifyError::MissingHeader("Authorization"))?;
        let mut matched = subtle::Choice::from(0);
        for secret in secrets {
            matched |= self
                .header_value(secret)
                .as_bytes()
                .ct_eq(value.trim().as_bytes());
        }
        if bool::from(matched) {
            Ok(())
        } else {
            Err(VerifyError::CredentialMismatch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_configured_credential_passes() {
        let secrets = vec!["new-token".to_string(), "old-token".to_string()];
        assert_eq!(
            Credential::Bearer.verify(Some("Bearer old-token"), &secrets),
            Ok(())
        );
        assert_eq!(
            Credential::Bearer.verify(Some("Bearer new-token"), &secrets),
            Ok(())
        );
        for bad in [
            "Bearer nope",
            "bearer new-token",
            "Bearer new-token2",
            "new-token",
            "Basic bmV3LXRva2Vu",
        ] {
            assert_eq!(
                Credential::Bearer.verify(Some(bad), &secrets),
                Err(VerifyError::CredentialMismatch),
                "{bad}"
            );
        }
        assert_eq!(
            Credential::Bearer.verify(None, &secrets),
            Err(VerifyError::MissingHeader("Authorization"))
        );
        let basic = vec!["user:pa:ss".to_string()];
        assert_eq!(
            Credential::Basic.verify(Some("Basic dXNlcjpwYTpzcw=="), &basic),
            Ok(())
        );
        assert_eq!(
            Credential::Basic.verify(Some("Basic dXNlcjpwYXNz"), &basic),
            Err(VerifyError::CredentialMismatch)
        );
    }
}
