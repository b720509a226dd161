//! A certificate authority made by the test run (rcgen), and server
//! certificates it signs: nothing kept in the repository, nothing that
//! outlives the test.

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A test CA: its certificate as PEM, and the key that signs.
pub struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A server's certificate chain and key, for a rustls server.
pub struct ServerCert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl TestCa {
    /// A new CA named `name` (its common name).
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A certificate for `names` (host names or IP addresses), valid now.
    pub fn server(&self, names: &[&str]) -> ServerCert {
        self.sign(names, false)
    }

    /// A certificate for `names` that expired in 2001.
    pub fn expired_server(&self, names: &[&str]) -> ServerCert {
        self.sign(names, true)
    }

    fn sign(&self, names: &[&str], expired: bool) -> ServerCert {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "test server");
        if expired {
            params.not_before = date_time_ymd(2000, 1, 1);
            params.not_after = date_time_ymd(2001, 1, 1);
        }
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        ServerCert {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }
}
