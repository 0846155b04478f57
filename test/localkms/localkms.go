// Package localkms runs a real implementation of the AWS KMS API on loopback for
// tests: nsmithuk/local-kms, built by `make test-tools` into bin/. It keeps its keys in
// a directory of the test's, and can be stopped and started again on the same port
// and keys, to show what a signer does while its KMS does not answer.
package localkms

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/trustsync/trustsync/test/controlplane"
)

// Region is the region the local KMS answers for.
const Region = "eu-west-1"

// KMS is one local KMS.
type KMS struct {
	Endpoint string
	bin, dir string
	port     int
	p        *controlplane.Process
}

// Start runs a local KMS until t ends. The SDK's credential chain reads the
// environment: any key will do, and Start sets one (Credentials).
func Start(t testing.TB) *KMS {
	t.Helper()
	Credentials(t)
	bin, err := controlplane.Tool("local-kms")
	if err != nil {
		t.Fatal(err)
	}
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k := &KMS{bin: bin, dir: t.TempDir(), port: port, Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	if err := k.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// Credentials gives the AWS SDK's credential chain a key in the environment for the
// rest of t, so that it never asks the instance metadata service of the machine the
// tests run on.
func Credentials(t testing.TB) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIATRUSTSYNCTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "trustsync-test-secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// KeyRef is a signer's keyRef naming alias in this KMS.
func (k *KMS) KeyRef(alias string) string {
	return fmt.Sprintf("awskms:key-id=alias/%s;region=%s;endpoint=%s", alias, Region, k.Endpoint)
}

// Start starts the KMS (again) and waits until it answers.
func (k *KMS) Start() error {
	p, err := controlplane.StartProcessEnv("local-kms", k.bin, nil, filepath.Join(k.dir, "local-kms.log"),
		[]string{"PORT=" + strconv.Itoa(k.port), "KMS_REGION=" + Region, "KMS_DATA_PATH=" + filepath.Join(k.dir, "data")})
	if err != nil {
		return err
	}
	k.p = p
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(k.Endpoint); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("local-kms did not answer on %s: %s", k.Endpoint, p.Tail())
}

// Stop stops the KMS; its keys stay for the next Start.
func (k *KMS) Stop() {
	if k.p != nil {
		k.p.Stop(5 * time.Second)
		k.p = nil
	}
}

// PublicKeys are the public keys of every signing key the KMS holds, asked of the KMS
// itself, not through the signer under test.
func (k *KMS) PublicKeys(ctx context.Context) ([]crypto.PublicKey, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(Region))
	if err != nil {
		return nil, err
	}
	client := kms.NewFromConfig(cfg, func(o *kms.Options) { o.BaseEndpoint = aws.String(k.Endpoint) })
	keys, err := client.ListKeys(ctx, &kms.ListKeysInput{})
	if err != nil {
		return nil, err
	}
	var out []crypto.PublicKey
	for _, key := range keys.Keys {
		resp, err := client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: key.KeyId})
		if err != nil {
			continue // a symmetric key has none
		}
		pub, err := x509.ParsePKIXPublicKey(resp.PublicKey)
		if err != nil {
			return nil, err
		}
		out = append(out, pub)
	}
	return out, nil
}
