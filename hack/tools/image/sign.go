package main

import (
	"bytes"
	"crypto"
	"crypto/elliptic"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Signatures in cosign's format, by key, with no transparency log: what `cosign verify
// --key cosign.pub --insecure-ignore-tlog` and `cosign verify-blob` check. Keyless
// signing needs the public Fulcio and Rekor, so it is the real CI's job; written here
// with sigstore's libraries because cosign's command line is not a library.
const (
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	signatureAnnotation    = "dev.cosignproject.cosign/signature"
)

// password is the key's password, from $COSIGN_PASSWORD as cosign takes it.
func password(bool) ([]byte, error) { return []byte(os.Getenv("COSIGN_PASSWORD")), nil }

// keygen writes cosign.key (encrypted with $COSIGN_PASSWORD, as cosign generate-key-pair
// writes it) and cosign.pub into dir.
func keygen(dir string) error {
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), password)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cosign.pub"), pub, 0o644)
}

func loadSigner(keyFile string) (signature.SignerVerifier, error) {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(data, password)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (a cosign key needs its password in $COSIGN_PASSWORD)", keyFile, err)
	}
	return signature.LoadSignerVerifier(priv, crypto.SHA256)
}

// signImage signs ref (by digest) and pushes the signature where cosign looks for it:
// the tag sha256-<hex>.sig of the same repository.
func signImage(keyFile, ref string) error {
	sv, err := loadSigner(keyFile)
	if err != nil {
		return err
	}
	digest, err := name.NewDigest(ref)
	if err != nil {
		return fmt.Errorf("%q: sign an image by digest (REPO@sha256:...): %w", ref, err)
	}
	pl, err := payload.Cosign{Image: digest}.MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := sv.SignMessage(bytes.NewReader(pl))
	if err != nil {
		return err
	}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer:       static.NewLayer(pl, simpleSigningMediaType),
		Annotations: map[string]string{signatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return err
	}
	tag := digest.Context().Tag(strings.Replace(digest.DigestStr(), ":", "-", 1) + ".sig")
	if err := remote.Write(tag, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push the signature of %s: %w", ref, err)
	}
	fmt.Printf("signed %s: %s\n", ref, tag)
	return nil
}

// signBlob writes file.sig: the base64 signature cosign sign-blob writes.
func signBlob(keyFile, file string) error {
	sv, err := loadSigner(keyFile)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	sig, err := sv.SignMessage(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return os.WriteFile(file+".sig", []byte(base64.StdEncoding.EncodeToString(sig)), 0o644)
}
