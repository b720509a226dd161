//! TLS for the HTTP client: rustls with the built-in roots (webpki-roots,
//! Mozilla's) and, beside them, the certificates of a CA bundle
//! (`AWS_CA_BUNDLE`, a profile's `ca_bundle`) and, when asked for, the
//! system's store ([`Trust`]). The roots are read once, when the store is
//! built: a file that cannot be used fails the configuration, naming the
//! file and the setting.
//!
//! [`TlsConnector`] wraps a connection (direct, or a proxy's tunnel) in
//! TLS, bounded by the request's timeout. A handshake that fails is a
//! request not sent; one that fails on the server's certificate is told
//! apart ([`Stage::Certificate`]), described (unknown issuer, expired,
//! wrong name) with the setting that fixes it, and never retried.

use super::{not_sent, not_sent_of, Stage};
use crate::settings::{ConfigError, Trust};
use rustls::client::ClientConnection;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore, StreamOwned};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::{fmt, time};
use ureq::unversioned::transport::time::Duration;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
    TransportAdapter,
};
use ureq::Error;

/// Where distributions keep the system's trust store as one PEM file (the
/// places Go and OpenSSL's probes look), tried in order when
/// `SSL_CERT_FILE` does not say.
const SYSTEM_STORES: [&str; 6] = [
    // Debian, Ubuntu, Arch, Gentoo, Alpine (ca-certificates)
    "/etc/ssl/certs/ca-certificates.crt",
    // Fedora, RHEL, CentOS
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/certs/ca-bundle.crt",
    // openSUSE
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    // Alpine, the BSDs, macOS (its base system's, not the keychain)
    "/etc/ssl/cert.pem",
];

/// What to change to trust a private CA, for messages.
const TRUST_FIX: &str = "to trust a private CA, name a PEM file of its certificate in \
                         AWS_CA_BUNDLE (or ca_bundle in the profile), or set \
                         BUCKET_LEASE_SYSTEM_TRUST=on to trust the system's store as well";

/// Wraps connections to `https://` endpoints in TLS (see the module).
pub(crate) struct TlsConnector {
    config: Arc<ClientConfig>,
    /// The roots trusted, for messages: "the built-in roots and …".
    trusted: Arc<str>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector")
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// A connector trusting the built-in roots and what `trust` adds.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and the setting, when a bundle
    /// cannot be read, holds no certificate or holds one that cannot be a
    /// root; when the system's store is asked for and none is found.
    pub(crate) fn new(trust: &Trust, what: &'static str) -> Result<TlsConnector, ConfigError> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let mut trusted = vec!["the built-in roots".to_string()];
        if let Some(bundle) = &trust.bundle {
            add_bundle(&mut roots, &bundle.value, bundle.setting, what)?;
            trusted.push(format!("{} ({})", bundle.value.display(), bundle.setting));
        }
        if let Some(setting) = trust.system {
            let file = add_system_store(&mut roots, trust.system_file.as_deref(), setting, what)?;
            trusted.push(format!("the system's store {} ({setting})", file.display()));
        }
        // The process's provider when the program installed one, else ring
        // (as ureq chooses).
        let provider = rustls::crypto::CryptoProvider::get_default()
            .cloned()
            .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
        let config = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| ConfigError::Invalid {
                what,
                value: "TLS".into(),
                why: format!("cannot be set up: {e}"),
                fix: "install a rustls crypto provider that offers TLS 1.2 and 1.3",
            })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(TlsConnector {
            config: Arc::new(config),
            trusted: trusted.join(" and ").into(),
        })
    }
}

/// The PEM bundle's certificates (none is an error).
fn read_pem(
    path: &Path,
    setting: &str,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let invalid = |why: String| ConfigError::Invalid {
        what,
        value: path.display().to_string(),
        why: format!("({setting}) {why}"),
        fix: "name a readable PEM file of CA certificates, or unset the setting",
    };
    let bytes = std::fs::read(path).map_err(|e| invalid(format!("cannot be read: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("is not a PEM file: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(
            "holds no certificate (no -----BEGIN CERTIFICATE----- block)".into(),
        ));
    }
    Ok(certs)
}

/// Add the certificates of the bundle at `path`, each of which must be
/// usable as a root.
fn add_bundle(
    roots: &mut RootCertStore,
    path: &Path,
    setting: &str,
    what: &'static str,
) -> Result<(), ConfigError> {
    for (i, cert) in read_pem(path, setting, what)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| ConfigError::Invalid {
            what,
            value: path.display().to_string(),
            why: format!(
                "({setting}) holds a certificate (number {}) that cannot be used as a root: {e}",
                i + 1
            ),
            fix: "name a PEM file of CA certificates, or unset the setting",
        })?;
    }
    Ok(())
}

/// Add the system's store (`file`, else the first of [`SYSTEM_STORES`]
/// that exists); the file used. A system store may hold certificates this
/// client cannot parse: those are skipped, as long as some are added.
fn add_system_store(
    roots: &mut RootCertStore,
    file: Option<&Path>,
    setting: &'static str,
    what: &'static str,
) -> Result<PathBuf, ConfigError> {
    let (path, named) = match file {
        Some(file) => (file.to_path_buf(), "SSL_CERT_FILE"),
        None => {
            let found = SYSTEM_STORES.iter().map(Path::new).find(|p| p.is_file());
            let Some(found) = found else {
                return Err(ConfigError::Missing {
                    what,
                    setting: "SSL_CERT_FILE",
                    fix: "the system's trust store was asked for (BUCKET_LEASE_SYSTEM_TRUST or \
                          system_trust()) and none is in /etc/ssl/certs/ca-certificates.crt, \
                          /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, \
                          /etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/ca-bundle.pem, \
                          /etc/pki/tls/cacert.pem or /etc/ssl/cert.pem; set SSL_CERT_FILE to \
                          the system's PEM bundle, or turn the system's store off",
                });
            };
            (found.to_path_buf(), setting)
        }
    };
    let certs = read_pem(&path, named, what)?;
    let (added, _skipped) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(ConfigError::Invalid {
            what,
            value: path.display().to_string(),
            why: format!("({named}) holds no certificate usable as a root"),
            fix: "point SSL_CERT_FILE at the system's PEM bundle, or turn the system's store off",
        });
    }
    Ok(path)
}

/// What a certificate failure means and what to do, for the error message.
fn describe(problem: &CertificateError, trusted: &str) -> String {
    use CertificateError::*;
    let (what, fix) = match problem {
        UnknownIssuer => (
            "the server's certificate is not signed by a CA this client trusts",
            TRUST_FIX,
        ),
        Expired | ExpiredContext { .. } => (
            "the server's certificate has expired",
            "renew the certificate on the server (or check this machine's clock)",
        ),
        NotValidYet | NotValidYetContext { .. } => (
            "the server's certificate is not valid yet",
            "check this machine's clock, and the certificate's dates",
        ),
        NotValidForName | NotValidForNameContext { .. } => (
            "the server's certificate is not valid for the endpoint's host name",
            "give the endpoint (AWS_ENDPOINT_URL) by a name the certificate holds, or, when \
             the bucket is in the host name, path-style addressing \
             (BUCKET_LEASE_ADDRESSING_STYLE=path)",
        ),
        Revoked => (
            "the server's certificate is revoked",
            "the server needs a new certificate",
        ),
        _ => (
            "the server's certificate cannot be verified",
            "check the server's certificate chain; if a private CA signed it, name a PEM file \
             of its certificate in AWS_CA_BUNDLE (or ca_bundle in the profile), or set \
             BUCKET_LEASE_SYSTEM_TRUST=on",
        ),
    };
    let rustls = rustls::Error::InvalidCertificate(problem.clone());
    format!("{what} ({rustls}); trusted: {trusted}; {fix}")
}

/// The remaining part of the request's timeout for the handshake: its
/// budget less what the connection (and a proxy's CONNECT) took.
fn time_left(details: &ConnectionDetails) -> NextTimeout {
    let mut timeout = details.timeout;
    if !timeout.after.is_not_happening() {
        let now = (details.current_time)();
        let spent = match (now, details.now) {
            (
                ureq::unversioned::transport::time::Instant::Exact(now),
                ureq::unversioned::transport::time::Instant::Exact(then),
            ) => now.saturating_duration_since(then),
            _ => time::Duration::ZERO,
        };
        timeout.after = Duration::Exact(timeout.after.saturating_sub(spent));
    }
    timeout
}

/// The error of a handshake that failed with `e`: a certificate failure
/// (permanent), a timeout, or another failure of the handshake, each a
/// request not sent.
fn handshake_error(e: io::Error, trusted: &str) -> Error {
    if let Some(rustls::Error::InvalidCertificate(problem)) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return not_sent(
            Stage::Certificate,
            io::ErrorKind::InvalidData,
            describe(problem, trusted),
        );
    }
    match Error::from(e) {
        e if not_sent_of(&e).is_some() => e,
        Error::Timeout(_) => not_sent(
            Stage::Tls,
            io::ErrorKind::TimedOut,
            "the TLS handshake did not finish in time",
        ),
        Error::Io(e) => not_sent(Stage::Tls, e.kind(), e),
        other => not_sent(Stage::Tls, io::ErrorKind::Other, other),
    }
}

impl<In: Transport> Connector<In> for TlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        let Some(transport) = chained else {
            return Err(not_sent(
                Stage::Tls,
                io::ErrorKind::NotConnected,
                "no connection to wrap in TLS",
            ));
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details
            .uri
            .authority()
            .map(|a| a.host().trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or_default();
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            not_sent(
                Stage::Tls,
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a host name TLS can check ({e})"),
            )
        })?;
        let mut connection = ClientConnection::new(Arc::clone(&self.config), name)
            .map_err(|e| not_sent(Stage::Tls, io::ErrorKind::Other, e))?;
        let mut socket = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        socket.set_timeout(time_left(details));
        let began = std::time::Instant::now();
        connection
            .complete_io(&mut socket)
            .map_err(|e| handshake_error(e, &self.trusted))?;
        crate::trace::handshook(began.elapsed());
        if connection.is_handshaking() {
            return Err(not_sent(
                Stage::Tls,
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection during the TLS handshake",
            ));
        }
        Ok(Some(Either::B(TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned::new(connection, socket),
        })))
    }
}

/// A TLS connection over another transport.
pub(crate) struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport")
            .field("over", &self.stream.sock.inner())
            .finish()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        self.stream.get_mut().set_timeout(timeout);
        let output = &self.buffers.output()[..amount];
        self.stream.write_all(output)?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        self.stream.get_mut().set_timeout(timeout);
        let input = self.buffers.input_append_buf();
        let amount = self.stream.read(input)?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.get_mut().get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Named;

    fn trust(bundle: Option<&Path>) -> Trust {
        Trust {
            bundle: bundle.map(|p| Named {
                value: p.to_path_buf(),
                setting: "AWS_CA_BUNDLE",
            }),
            ..Trust::default()
        }
    }

    /// A bundle's roots are added to the built-in ones, never in their place.
    #[test]
    fn a_bundle_adds_to_the_built_in_roots() {
        let plain = TlsConnector::new(&trust(None), "s3").unwrap();
        assert_eq!(&*plain.trusted, "the built-in roots");
        // The system's store, where this machine has one, is a bundle of
        // real roots; given as AWS_CA_BUNDLE, it is added beside.
        let Some(system) = SYSTEM_STORES.iter().map(Path::new).find(|p| p.is_file()) else {
            return;
        };
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let before = roots.len();
        let (added, _) = roots.add_parsable_certificates(read_pem(system, "x", "s3").unwrap());
        assert!(added > 0 && roots.len() == before + added);
        let with = TlsConnector::new(&trust(Some(system)), "s3");
        // A store may hold certificates that are not roots; when it builds,
        // it says what it trusts.
        if let Ok(with) = with {
            assert_eq!(
                &*with.trusted,
                format!(
                    "the built-in roots and {} (AWS_CA_BUNDLE)",
                    system.display()
                )
            );
        }
    }

    #[test]
    fn certificate_problems_name_what_to_change() {
        let unknown = describe(&CertificateError::UnknownIssuer, "the built-in roots");
        assert_eq!(
            unknown,
            format!(
                "the server's certificate is not signed by a CA this client trusts (invalid \
                 peer certificate: UnknownIssuer); trusted: the built-in roots; {TRUST_FIX}"
            )
        );
        assert!(describe(&CertificateError::Expired, "r").contains("has expired"));
        assert!(describe(&CertificateError::NotValidForName, "r")
            .contains("BUCKET_LEASE_ADDRESSING_STYLE=path"));
        assert!(describe(&CertificateError::BadSignature, "r").contains("AWS_CA_BUNDLE"));
    }
}
