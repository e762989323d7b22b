//! A throwaway certificate authority for TLS tests: `localhost` server and client pairs it signs, written
//! as `tls.crt`/`tls.key` the way a mounted Secret holds them.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA (its certificate and key, in memory).
pub struct TestCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// One pair the CA issued: PEM certificate and key, and the certificate's DER (what a peer is shown).
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: Vec<u8>,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A subject of its own: rcgen's default equals the leaves', which OpenSSL (Envoy) then takes for
        // self-signed.
        params.distinguished_name.push(DnType::CommonName, "epp test CA");
        let key = KeyPair::generate().expect("CA key");
        let cert = params.self_signed(&key).expect("CA certificate");
        Self { cert, key }
    }

    /// A new `localhost` pair signed by this CA.
    pub fn issue(&self) -> Issued {
        let params = CertificateParams::new(vec!["localhost".to_string()]).expect("leaf params");
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("leaf certificate");
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() }
    }

    /// Issues a pair into `dir/tls.crt` and `dir/tls.key`, each written aside and renamed into place (as a
    /// mounted Secret's update swaps its files at once); returns the certificate's DER.
    pub fn issue_into(&self, dir: &Path) -> Vec<u8> {
        std::fs::create_dir_all(dir).expect("certificate directory");
        let issued = self.issue();
        for (name, text) in [("tls.key", &issued.key_pem), ("tls.crt", &issued.cert_pem)] {
            let staged = dir.join(format!(".{name}.new"));
            std::fs::write(&staged, text).expect("write a staged file");
            std::fs::rename(&staged, dir.join(name)).expect("rename into place");
        }
        issued.der
    }

    /// The CA certificate, PEM (a client-CA or trust bundle file's content).
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The CA certificate, DER (a root for a rustls client).
    pub fn cert_der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }
}
