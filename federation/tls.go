package federation

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// MutualTLS builds the cluster port's TLS from a node's certificate and the
// cluster's CA pool: both sides present a certificate and accept any that
// the pool signed, whatever host name it carries (nodes dial each other by
// address) and whatever its key usages say.
//
// TLS 1.3 is preferred; TLS 1.2 is offered with AEAD suites only.
func MutualTLS(cert tls.Certificate, pool *x509.CertPool) (server, client *tls.Config) {
	verify := verifyChain(pool)
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: verify, MinVersion: tls.VersionTLS12, CipherSuites: AEADSuites}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true,
		VerifyConnection: verify, MinVersion: tls.VersionTLS12, CipherSuites: AEADSuites}
	return server, client
}

// AEADSuites are the TLS 1.2 cipher suites the cluster port offers:
// forward secret and authenticated (TLS 1.3's are always AEAD).
var AEADSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// verifyChain checks the peer's certificate chain against pool; it stands
// in for the standard verification that InsecureSkipVerify and
// RequireAnyClientCert turn off.
func verifyChain(pool *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("cluster peer sent no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return err
		}
		if cs.PeerCertificates[0].Subject.CommonName == "" {
			return errors.New("cluster peer's certificate names no node (its common name is empty)")
		}
		return nil
	}
}
