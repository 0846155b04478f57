package keeper

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
	"go.step.sm/crypto/kms/apiv1"
	"go.step.sm/crypto/kms/awskms"

	"github.com/trustsync/trustsync/keyuri"
)

// awsKMS is AWS KMS as a KeyManager. go.step.sm/crypto's own (awskms.New) cannot be
// pointed at an endpoint, which a VPC endpoint and the tests' local KMS need, so the
// client is made here; signing is still the library's (awskms.NewSigner).
type awsKMS struct {
	client *kms.Client
}

// kmsTimeout bounds each call: a KMS that does not answer is a keeper that is away.
const kmsTimeout = 10 * time.Second

// connectAWSKMS makes a client for ref's region (and endpoint), with the SDK's own
// credential chain (IRSA or Pod Identity in a cluster, the environment elsewhere),
// and asks once, so a keyRef that cannot reach KMS is refused at start.
func connectAWSKMS(ctx context.Context, ref *keyuri.Ref) (apiv1.KeyManager, error) {
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(ref.Region))
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	client := kms.NewFromConfig(cfg, func(o *kms.Options) {
		if ref.Endpoint != "" {
			o.BaseEndpoint = aws.String(ref.Endpoint)
		}
	})
	k := &awsKMS{client: client}
	ctx, cancel := context.WithTimeout(ctx, kmsTimeout)
	defer cancel()
	if _, err := client.ListKeys(ctx, &kms.ListKeysInput{Limit: aws.Int32(1)}); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *awsKMS) GetPublicKey(req *apiv1.GetPublicKeyRequest) (crypto.PublicKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kmsTimeout)
	defer cancel()
	resp, err := k.client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(kmsKeyID(req.Name))})
	if err != nil {
		return nil, notFound(err)
	}
	return x509.ParsePKIXPublicKey(resp.PublicKey)
}

// CreateKey makes an ECC_NIST_P256 signing key (KMS never exports an asymmetric
// key's private half) with the alias req.Name names, and returns it by key id.
func (k *awsKMS) CreateKey(req *apiv1.CreateKeyRequest) (*apiv1.CreateKeyResponse, error) {
	name := strings.TrimPrefix(req.Name, "awskms:name=")
	ctx, cancel := context.WithTimeout(context.Background(), kmsTimeout)
	defer cancel()
	created, err := k.client.CreateKey(ctx, &kms.CreateKeyInput{
		KeySpec: types.KeySpecEccNistP256, KeyUsage: types.KeyUsageTypeSignVerify,
		Description: aws.String("trustsync CA key " + name),
		Tags:        []types.Tag{{TagKey: aws.String("trustsync.io/ca-key"), TagValue: aws.String(name)}},
	})
	if err != nil {
		return nil, err
	}
	id := aws.ToString(created.KeyMetadata.KeyId)
	if _, err := k.client.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String("alias/" + name), TargetKeyId: aws.String(id)}); err != nil {
		return nil, fmt.Errorf("naming key %s alias/%s: %w", id, name, err)
	}
	return &apiv1.CreateKeyResponse{Name: "awskms:key-id=" + id}, nil
}

func (k *awsKMS) CreateSigner(req *apiv1.CreateSignerRequest) (crypto.Signer, error) {
	s, err := awskms.NewSigner(k.client, "awskms:key-id="+kmsKeyID(req.SigningKey))
	if err != nil {
		return nil, notFound(err)
	}
	return s, nil
}

func (k *awsKMS) Close() error { return nil }

// kmsKeyID is the KMS KeyId of a recorded key (awskms:key-id=ID).
func kmsKeyID(key string) string {
	_, id, _ := strings.Cut(key, "key-id=")
	return id
}

// notFound turns KMS's NotFoundException into the library's NotFoundError.
func notFound(err error) error {
	var nf *types.NotFoundException
	if errors.As(err, &nf) {
		return apiv1.NotFoundError{Message: nf.Error()}
	}
	return err
}
