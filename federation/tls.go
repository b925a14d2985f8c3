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
func MutualTLS(cert tls.Certificate, pool *x509.CertPool) (server, client *tls.Config) {
	verify := verifyChain(pool)
	server = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: verify, MinVersion: tls.VersionTLS12}
	client = &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true,
		VerifyConnection: verify, MinVersion: tls.VersionTLS12}
	return server, client
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
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
}
