// Package devcerts makes a local certificate authority and the
// certificates XCT's services and clients use for mTLS in development and
// tests (`xct dev certs`). Service certificates carry the SPIFFE ID
// spiffe://xct.local/service/<name> that internal/auth maps to a service
// principal. Production takes its certificates from cert-manager or SPIFFE
// instead (docs/security.md).
package devcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/xct-dev/xct/internal/auth"
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a self-signed CA valid for the given time.
func NewCA(name string, validFor time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"XCT development"}},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Leaf is what a certificate says about its holder.
type Leaf struct {
	// CommonName is informational.
	CommonName string
	// SPIFFE is the URI SAN (nil: none).
	SPIFFE *url.URL
	// DNS and IPs are the names a server answers to.
	DNS []string
	IPs []net.IP
	// ValidFor is the lifetime from now.
	ValidFor time.Duration
}

// Issue signs a certificate usable as both TLS server and client, and
// returns it and its key as PEM.
func (ca *CA) Issue(l Leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if l.ValidFor == 0 {
		l.ValidFor = 365 * 24 * time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.CommonName},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(l.ValidFor),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     l.DNS,
		IPAddresses:  l.IPs,
	}
	if l.SPIFFE != nil {
		tmpl.URIs = []*url.URL{l.SPIFFE}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// Services are the services `xct dev certs` issues certificates for.
var Services = []string{"orchestrator", "validator", "executor", "tracer"}

// ServiceLeaf is a service's certificate: its SPIFFE ID, and the names it
// is reached by on a laptop and in the Kubernetes manifests (deploy/k8s:
// the Service <name> in the namespace xct).
func ServiceLeaf(name string) Leaf {
	return Leaf{
		CommonName: name,
		SPIFFE:     auth.ServiceID(name),
		DNS:        []string{"localhost", name, name + ".xct", name + ".xct.svc", name + ".xct.svc.cluster.local"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
}

// Write creates dir with a new CA and a certificate and key per service
// (<name>.crt, <name>.key) and one for clients (client.crt, client.key);
// ca.crt is the bundle everyone trusts. Existing files are not
// overwritten: it fails instead.
func Write(dir string) ([]string, error) {
	ca, err := NewCA("XCT development CA", 5*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	caKey, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"ca.crt": ca.CertPEM,
		"ca.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: caKey}),
	}
	order := []string{"ca.crt", "ca.key"}
	leaves := map[string]Leaf{}
	for _, s := range Services {
		leaves[s] = ServiceLeaf(s)
	}
	// A person's client certificate: it secures the connection; the
	// token says who they are.
	leaves["client"] = Leaf{CommonName: "xct-client"}
	for _, name := range append(append([]string{}, Services...), "client") {
		c, k, err := ca.Issue(leaves[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name+".crt"], files[name+".key"] = c, k
		order = append(order, name+".crt", name+".key")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var written []string
	for _, name := range order {
		path := filepath.Join(dir, name)
		mode := os.FileMode(0o644)
		if filepath.Ext(name) == ".key" {
			mode = 0o600
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, os.ErrExist) {
			return written, fmt.Errorf("%s exists: remove the directory's certificates first", path)
		}
		if err != nil {
			return written, err
		}
		if _, err := f.Write(files[name]); err != nil {
			_ = f.Close()
			return written, err
		}
		if err := f.Close(); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}
