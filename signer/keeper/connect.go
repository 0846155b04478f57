package keeper

import (
	"context"
	"errors"
	"fmt"

	"go.step.sm/crypto/kms/apiv1"
	"go.step.sm/crypto/kms/pkcs11"

	"github.com/trustsync/trustsync/keyuri"
)

// connect opens the keeper through go.step.sm/crypto/kms. Built without cgo (the
// default images), its PKCS#11 keeper says so; the trustsync-signer-pkcs11 build has it.
func connect(ctx context.Context, ref *keyuri.Ref) (apiv1.KeyManager, error) {
	switch ref.Keeper {
	case keyuri.KeeperPKCS11:
		if !PKCS11Built {
			return nil, errors.New("this signer is built without PKCS#11, which needs cgo: run trustsync-signer-pkcs11 (the image <image>-signer-pkcs11; in the chart, signer.pkcs11.enabled=true)")
		}
		// The library reads the PIN from pin-source itself; the URI holds no PIN.
		km, err := pkcs11.New(ctx, apiv1.Options{Type: apiv1.PKCS11, URI: ref.String()})
		if err != nil {
			return nil, err
		}
		return km, nil
	case keyuri.KeeperAWSKMS:
		return connectAWSKMS(ctx, ref)
	}
	return nil, fmt.Errorf("keeper %q is not known", ref.Keeper)
}

func isNotFound(err error) bool {
	var nf apiv1.NotFoundError
	return errors.As(err, &nf)
}
