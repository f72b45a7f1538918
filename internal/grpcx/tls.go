package grpcx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/xct-dev/xct/internal/reload"
)

// TLSFiles names the PEM files of a TLS identity: its certificate chain and
// key, and the CA bundle its peers' certificates must chain to. They are
// re-read when they change, so a rotated certificate is used from the next
// handshake on without a restart.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether any TLS file is named.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// certCheckInterval bounds how often the files are looked at.
const certCheckInterval = time.Second

// tlsMaterial is one version of the files, parsed.
type tlsMaterial struct {
	cert *tls.Certificate // nil for a client without a certificate
	pool *x509.CertPool
}

func loadTLS(f TLSFiles, server bool, log *slog.Logger) (*reload.Files[*tlsMaterial], error) {
	if f.CA == "" {
		return nil, errors.New("--tls-ca is required with TLS: peers are verified against it")
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if server && f.Cert == "" {
		return nil, errors.New("a server needs --tls-cert and --tls-key")
	}
	paths := []string{f.CA}
	if f.Cert != "" {
		paths = append(paths, f.Cert, f.Key)
	}
	onError := func(err error) {
		if log != nil {
			log.Error("TLS files changed but cannot be used; keeping the last good ones", "err", err)
		}
	}
	files, err := reload.New(func(data [][]byte) (*tlsMaterial, error) {
		m := &tlsMaterial{pool: x509.NewCertPool()}
		if !m.pool.AppendCertsFromPEM(data[0]) {
			return nil, errors.New("the CA file holds no PEM certificate")
		}
		if len(data) == 3 {
			cert, err := tls.X509KeyPair(data[1], data[2])
			if err != nil {
				return nil, fmt.Errorf("certificate and key: %w", err)
			}
			m.cert = &cert
		}
		return m, nil
	}, certCheckInterval, onError, paths...)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return files, nil
}

// reloadingCreds are gRPC transport credentials that build a fresh TLS
// configuration from the current files for every handshake: TLS 1.3, and
// on a server a client certificate signed by the CA is required.
type reloadingCreds struct {
	files      *reload.Files[*tlsMaterial]
	server     bool
	serverName string
}

func (c *reloadingCreds) config() *tls.Config {
	m := c.files.Get()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if m.cert != nil {
		cfg.Certificates = []tls.Certificate{*m.cert}
	}
	if c.server {
		cfg.ClientCAs = m.pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	} else {
		cfg.RootCAs = m.pool
		cfg.ServerName = c.serverName
	}
	return cfg
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ServerHandshake(conn)
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13}).Info()
}

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// OverrideServerName implements credentials.TransportCredentials.
//
//nolint:staticcheck // part of the interface
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}
