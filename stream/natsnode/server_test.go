package natsnode_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/stream/natsnode"
)

func startWith(t *testing.T, opts func(*server.Options)) *natsnode.Embedded {
	t.Helper()
	e, err := natsnode.StartEmbedded(context.Background(), natsnode.EmbeddedConfig{Dir: t.TempDir(), Listen: "127.0.0.1:-1", Sync: natsnode.SyncInterval, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// TestConnectNKey: Connect authenticates with an nkey seed file, and a
// connection without it is refused.
func TestConnectNKey(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	e := startWith(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	ctx := context.Background()
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: e.ClientURL(), NKeySeedFile: seedFile})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("x", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: e.ClientURL(), ConnectTimeout: 500 * time.Millisecond}); err == nil {
		t.Fatal("connected without the nkey")
	}
}

// TestConnectTLSCA: Connect verifies the server against the given CA file.
func TestConnectTLSCA(t *testing.T) {
	dir := t.TempDir()
	cert, caFile := selfSigned(t, dir)
	e := startWith(t, func(o *server.Options) {
		o.TLS = true
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	})
	ctx := context.Background()
	url := strings.Replace(e.ClientURL(), "nats://", "tls://", 1)
	nc, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, TLSCA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if _, err := natsnode.Connect(ctx, natsnode.ConnectConfig{URL: url, ConnectTimeout: 500 * time.Millisecond}); err == nil {
		t.Fatal("connected without trusting the CA")
	}
}

func TestConnectUnreachable(t *testing.T) {
	start := time.Now()
	_, err := natsnode.Connect(context.Background(), natsnode.ConnectConfig{URL: "nats://127.0.0.1:1", ConnectTimeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("gave up after %s", time.Since(start))
	}
}

func selfSigned(t *testing.T, dir string) (tls.Certificate, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "jingwei test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caFile
}

func TestConnectInProcess(t *testing.T) {
	e := startWith(t, nil)
	nc, err := e.ConnectInProcess()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v %v", m, err)
	}
}
