package federation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// A cluster's certificates: one CA per cluster, and one certificate per
// node, signed by it, whose subject common name is the node's id. The
// cluster port trusts a peer only with a certificate the CA signed, and a
// peer is the node its certificate names: a stream claiming another
// owner, or a join claiming another id, is refused (see PeerNodeID).

// Certificate lifetimes.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	NodeLifetime = 5 * 365 * 24 * time.Hour
)

// NewCA makes a cluster CA: its certificate and key, PEM-encoded.
func NewCA(name string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Fibril cluster"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	return encode(der, key)
}

// NewNodeCert makes node id's certificate and key, PEM-encoded, signed by
// the CA; hosts (names or addresses) are added as alternative names.
func NewNodeCert(caCertPEM, caKeyPEM []byte, id string, hosts []string) (certPEM, keyPEM []byte, err error) {
	if id == "" {
		return nil, nil, errors.New("a node certificate needs the node's id")
	}
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA certificate: %w", err)
	}
	if !caCert.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate node key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id, Organization: []string{"Fibril cluster"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(NodeLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{id},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create node certificate: %w", err)
	}
	return encode(der, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// PeerNodeID is the node a cluster connection's peer is: the common name
// of the certificate it presented (the mux verified it against the
// cluster CA). ok is false for a connection without TLS, where the
// cluster runs insecure and nothing names the peer.
func PeerNodeID(c net.Conn) (id string, ok bool) {
	if s, isStream := c.(interface{ PeerNode() (string, bool) }); isStream {
		return s.PeerNode() // a stream of a link: the link's peer
	}
	tc, isTLS := c.(*tls.Conn)
	if !isTLS {
		return "", false
	}
	st := tc.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return "", false
	}
	return st.PeerCertificates[0].Subject.CommonName, true
}
