//go:build !cgo || nopkcs11

package keeper

// PKCS11Built says whether this binary can load a PKCS#11 module: it needs cgo, so
// only trustsync-signer-pkcs11 can.
const PKCS11Built = false
