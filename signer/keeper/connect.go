package keeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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
		if err := checkModule(ref.ModulePath); err != nil {
			return nil, err
		}
		// The library reads the PIN from pin-source itself; the URI holds no PIN.
		km, err := pkcs11.New(ctx, apiv1.Options{Type: apiv1.PKCS11, URI: ref.String()})
		if err != nil {
			if strings.Contains(err.Error(), "failed to open module") {
				return nil, fmt.Errorf("%w: %s is there but does not load: a library it links is missing from the signer's container (mount it, and name its directory in LD_LIBRARY_PATH: the chart's signer.pkcs11.env), or it is built for another architecture", err, ref.ModulePath)
			}
			return nil, err
		}
		return km, nil
	case keyuri.KeeperAWSKMS:
		return connectAWSKMS(ctx, ref)
	}
	return nil, fmt.Errorf("keeper %q is not known", ref.Keeper)
}

// checkModule says what is wrong with a module path the loader would only call
// unopenable: the file is not there, or it is a symlink whose target is not (a
// directory of symlinks mounted without the files they point to).
func checkModule(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if target, err := os.Readlink(path); err == nil {
		return fmt.Errorf("module-path %s is a symlink to %s, which is not there in the signer's container: mount the directory that holds the library itself", path, target)
	}
	return fmt.Errorf("module-path %s: no such file in the signer's container: mount the vendor's library there (in the chart, signer.pkcs11.volumes and volumeMounts)", path)
}

func isNotFound(err error) bool {
	var nf apiv1.NotFoundError
	return errors.As(err, &nf)
}
