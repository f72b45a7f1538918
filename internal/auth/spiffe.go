package auth

import (
	"context"
	"crypto/x509"
	"net/url"
	"regexp"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// TrustDomain is the SPIFFE trust domain of XCT's service certificates.
const TrustDomain = "xct.local"

// servicePathPrefix is the SPIFFE path of a service identity.
const servicePathPrefix = "/service/"

// ServicePrincipalPrefix starts the name of a service principal.
const ServicePrincipalPrefix = "service:"

var serviceNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ServiceID is the SPIFFE ID of a service's certificate.
func ServiceID(name string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: TrustDomain, Path: servicePathPrefix + name}
}

// CertPrincipal is the principal of a verified client certificate: a URI
// SAN spiffe://xct.local/service/<name> makes it service:<name> with role
// service. Any other certificate names no principal (a person's client
// certificate secures the connection; their token says who they are).
func CertPrincipal(cert *x509.Certificate) (Principal, bool) {
	var found Principal
	n := 0
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != TrustDomain || !strings.HasPrefix(u.Path, servicePathPrefix) {
			continue
		}
		name := strings.TrimPrefix(u.Path, servicePathPrefix)
		if !serviceNameRE.MatchString(name) || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			continue
		}
		found = Principal{Name: ServicePrincipalPrefix + name, Roles: []string{RoleService}, Service: true}
		n++
	}
	// SPIFFE allows exactly one SPIFFE ID per certificate.
	if n != 1 {
		return Principal{}, false
	}
	return found, true
}

// PeerPrincipal is the principal of the verified client certificate of the
// connection ctx belongs to, if it has one.
func PeerPrincipal(ctx context.Context) (Principal, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return Principal{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Principal{}, false
	}
	return CertPrincipal(info.State.VerifiedChains[0][0])
}
