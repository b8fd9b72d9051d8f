package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// writeCerts writes a CA and a certificate it signed for 127.0.0.1, as PEM
// files in dir: ca.pem, server.pem, server-key.pem.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "guardctl test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem":     {Type: "CERTIFICATE", Bytes: leafDER},
		"server-key.pem": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	writeCerts(t, dir)
	tlsPort := strconv.Itoa(freePort(t))
	srv := redistest.Start(t, "--tls-port", tlsPort,
		"--tls-cert-file", filepath.Join(dir, "server.pem"), "--tls-key-file", filepath.Join(dir, "server-key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"), "--tls-auth-clients", "no")
	l := newLocker(t, srv.Client(t), guard.WithIdentity("over-tls"))
	le := acquire(t, t.Context(), l, "secure")
	defer func() { _ = le.Release(context.Background()) }()

	url := "--url=rediss://127.0.0.1:" + tlsPort
	r := must(t, 0, nil, url, "--cacert", filepath.Join(dir, "ca.pem"), "show", "secure")
	if !strings.Contains(r.stdout, "over-tls") {
		t.Errorf("show over TLS:\n%s", r.stdout)
	}
	r = must(t, 2, nil, url, "--timeout=2s", "show", "secure")
	if !strings.Contains(r.stderr, "certificate") {
		t.Errorf("without the CA: %q; want a certificate error", r.stderr)
	}
	must(t, 0, nil, url+"?skip_verify=true", "show", "secure")
	r = must(t, 2, nil, "--url=redis://"+srv.Addr(), "--cacert", filepath.Join(dir, "ca.pem"), "show", "secure")
	if !strings.Contains(r.stderr, "--cacert needs a TLS URL") {
		t.Errorf("--cacert with redis://: %q", r.stderr)
	}
	r = must(t, 2, nil, url, "--cacert", filepath.Join(dir, "server-key.pem"), "show", "secure")
	if !strings.Contains(r.stderr, "no PEM certificate") {
		t.Errorf("--cacert with a key: %q", r.stderr)
	}
}
