package v1alpha1

import (
	"bytes"
	"crypto/fips140"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/bundle/truststore"
)

// MaxSources bounds one pod's source list: each source is a watch, and a pod asking
// for more than this is almost certainly a mistake.
const MaxSources = 32

// The files a workload certificate is written as, next to the trust files (by the
// sidecar and the node agent alike).
const (
	FileCertificate      = "tls.crt"
	FileKey              = "tls.key"
	FileCredentialBundle = "credential.pem"
)

// ReservedPaths are the files the sidecar writes for a workload certificate; no
// source may use them.
var ReservedPaths = sets.New(FileCertificate, FileKey, FileCredentialBundle)

// Source is one item of the sources list, the JSON shape the trustsync.io/bundles
// annotation and the sidecar's --sources flag share. It names exactly one source
// of anchors and the file (Path) they go to; items sharing a path are merged.
type Source struct {
	// Name selects one bundle by name, in upstream form.
	Name string `json:"name,omitempty"`
	// SignerName with LabelSelector selects a signer's bundles (nil selector: none;
	// empty selector: all).
	SignerName    string                `json:"signerName,omitempty"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// ConfigMap and Secret take CA data from a key of an object in the pod's namespace.
	ConfigMap *KeyRef `json:"configMap,omitempty"`
	Secret    *KeyRef `json:"secret,omitempty"`
	// DefaultCAs adds the public web roots.
	DefaultCAs bool `json:"defaultCAs,omitempty"`
	// Path is the file, relative to the volume.
	Path string `json:"path"`
	// Optional: a source that matches nothing is not an error. A path is optional
	// only when every source writing it is.
	Optional bool `json:"optional,omitempty"`
	// Format of the file: FormatPEM (the default), or a Java truststore, FormatPKCS12
	// or FormatJKS. Items sharing a path agree on it.
	Format string `json:"format,omitempty"`
	// PasswordSecret names the key of a Secret in the pod's namespace that holds a
	// truststore's password; without it the password is DefaultStorePassword.
	PasswordSecret *KeyRef `json:"passwordSecret,omitempty"`
	// PKCS12Profile is how a pkcs12 truststore is protected: PKCS12Modern2023 or
	// PKCS12Modern2026 (Profile: the default made explicit).
	PKCS12Profile string `json:"pkcs12Profile,omitempty"`
}

// File formats.
const (
	FormatPEM    = "pem"
	FormatPKCS12 = "pkcs12"
	FormatJKS    = "jks"
)

// Formats lists every file format, the default first.
var Formats = []string{FormatPEM, FormatPKCS12, FormatJKS}

// DefaultStorePassword is a truststore's password when no Secret names one: Java's
// default, since a truststore's content is public and the password only guards it
// against tampering in transit, which a local file does not see.
const DefaultStorePassword = "changeit"

// PKCS#12 profiles, named as go-pkcs12 names them. Modern2023: PBES2 and a MAC keyed
// by PKCS#12's own KDF over SHA-256, which every Java since 8u301 reads. Modern2026:
// the MAC is PBMAC1 (PBKDF2 with HMAC-SHA-256, RFC 9579), the one FIPS 140-3 mode
// allows, which FIPS Java reads.
const (
	PKCS12Modern2023 = truststore.Modern2023
	PKCS12Modern2026 = truststore.Modern2026
)

// PKCS12Profiles lists every PKCS#12 profile, the default first.
var PKCS12Profiles = []string{PKCS12Modern2023, PKCS12Modern2026}

// FIPSMode says whether this process runs in FIPS 140-3 mode, where a source may ask
// only for what the mode allows (CheckFIPS). A variable so tests can set it.
var FIPSMode = fips140.Enabled

// Profile is a pkcs12 source's profile, the default made explicit: Modern2023, or in
// FIPS mode Modern2026, the only one it allows. "" for other formats.
func (s Source) Profile() string {
	switch {
	case s.FileFormat() != FormatPKCS12:
		return ""
	case s.PKCS12Profile != "":
		return s.PKCS12Profile
	case FIPSMode():
		return PKCS12Modern2026
	}
	return PKCS12Modern2023
}

// FileFormat is the source's format, the default made explicit.
func (s Source) FileFormat() string {
	if s.Format == "" {
		return FormatPEM
	}
	return s.Format
}

// KeyRef names one key of a ConfigMap or Secret in the pod's namespace.
type KeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Selector returns the bundle selector of a name or signerName source.
func (s Source) Selector() (bundle.Selector, bool) {
	if s.Name == "" && s.SignerName == "" {
		return bundle.Selector{}, false
	}
	return bundle.Selector{Name: s.Name, SignerName: s.SignerName, LabelSelector: s.LabelSelector}, true
}

// kinds names the kinds of source an item sets, for the exactly-one rule.
func (s Source) kinds() []string {
	var k []string
	if s.Name != "" {
		k = append(k, "name")
	}
	if s.SignerName != "" {
		k = append(k, "signerName")
	}
	if s.ConfigMap != nil {
		k = append(k, "configMap")
	}
	if s.Secret != nil {
		k = append(k, "secret")
	}
	if s.DefaultCAs {
		k = append(k, "defaultCAs")
	}
	return k
}

// ParseSources decodes a sources list strictly (an unknown field is an error, so a
// typo such as "signer" never silently selects nothing) and validates it.
func ParseSources(data []byte) ([]Source, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sources []Source
	if err := dec.Decode(&sources); err != nil {
		return nil, fmt.Errorf("not a JSON list of sources: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a JSON list of sources: unexpected data after the list")
	}
	if errs := ValidateSources(sources, field.NewPath("sources")); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return sources, nil
}

// ValidateSources checks a sources list: at least one item, each with exactly one
// kind of source and a valid path.
func ValidateSources(sources []Source, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(sources) == 0 {
		errs = append(errs, field.Required(fldPath, "at least one source is required"))
	}
	if len(sources) > MaxSources {
		errs = append(errs, field.TooMany(fldPath, len(sources), MaxSources))
	}
	var paths []string
	for i, s := range sources {
		itemErrs := s.Validate(fldPath.Index(i))
		if len(itemErrs) == 0 {
			paths = append(paths, s.Path)
		}
		errs = append(errs, itemErrs...)
	}
	errs = append(errs, validateSharedPaths(sources, fldPath)...)
	// One item's file cannot be another's directory: the pod's files are written in one
	// step, so such a pair would leave every file of the pod unwritten.
	if file, under, ok := FileDirectoryConflict(paths); ok {
		i := slices.IndexFunc(sources, func(s Source) bool { return s.Path == under })
		errs = append(errs, field.Invalid(fldPath.Index(i).Child("path"), under, fmt.Sprintf("needs %q to be a directory, but another item writes the file %q", file, file)))
	}
	return errs
}

// Validate checks one source.
func (s Source) Validate(fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch kinds := s.kinds(); {
	case len(kinds) == 0:
		errs = append(errs, field.Required(fldPath, "exactly one of name, signerName, configMap, secret or defaultCAs must be set"))
	case len(kinds) > 1:
		errs = append(errs, field.Invalid(fldPath, strings.Join(kinds, ", "), "exactly one of name, signerName, configMap, secret or defaultCAs must be set"))
	case s.Name != "" || s.SignerName != "":
		sel, _ := s.Selector()
		errs = append(errs, sel.Validate(fldPath)...)
	case s.ConfigMap != nil:
		errs = append(errs, s.ConfigMap.validate(fldPath.Child("configMap"))...)
	case s.Secret != nil:
		errs = append(errs, s.Secret.validate(fldPath.Child("secret"))...)
	}
	if s.Format != "" && !slices.Contains(Formats, s.Format) {
		errs = append(errs, field.NotSupported(fldPath.Child("format"), s.Format, Formats))
	}
	if s.PKCS12Profile != "" {
		if s.FileFormat() != FormatPKCS12 {
			errs = append(errs, field.Invalid(fldPath.Child("pkcs12Profile"), s.PKCS12Profile, "goes with format pkcs12 only"))
		} else if !slices.Contains(PKCS12Profiles, s.PKCS12Profile) {
			errs = append(errs, field.NotSupported(fldPath.Child("pkcs12Profile"), s.PKCS12Profile, PKCS12Profiles))
		}
	}
	errs = append(errs, s.checkFIPS(fldPath)...)
	if s.PasswordSecret != nil {
		if s.FileFormat() == FormatPEM {
			errs = append(errs, field.Invalid(fldPath.Child("passwordSecret"), s.PasswordSecret.Name, "goes with format pkcs12 or jks only; a PEM file has no password"))
		}
		errs = append(errs, s.PasswordSecret.validate(fldPath.Child("passwordSecret"))...)
	}
	if s.LabelSelector != nil && s.SignerName == "" && s.Name == "" {
		errs = append(errs, field.Invalid(fldPath.Child("labelSelector"), "", "labelSelector goes with signerName only"))
	}
	return append(errs, ValidatePath(fldPath.Child("path"), s.Path)...)
}

// checkFIPS refuses, in FIPS 140-3 mode, a file the mode cannot write: a JKS store
// (its integrity digest is SHA-1 keyed by the password, which the mode does not allow)
// and a PKCS#12 store of profile Modern2023 (its MAC key comes from PKCS#12's own KDF,
// which the mode does not approve). Refused where the source is written, at admission,
// not when the file would be written.
func (s Source) checkFIPS(fldPath *field.Path) field.ErrorList {
	if !FIPSMode() {
		return nil
	}
	switch {
	case s.FileFormat() == FormatJKS:
		return field.ErrorList{field.Invalid(fldPath.Child("format"), FormatJKS, "FIPS 140-3 mode cannot write a JKS truststore (its integrity check is SHA-1 keyed by the password, which FIPS 140-3 does not allow): use format pkcs12, which FIPS Java reads with pkcs12Profile Modern2026")}
	case s.Profile() == PKCS12Modern2023:
		return field.ErrorList{field.Invalid(fldPath.Child("pkcs12Profile"), PKCS12Modern2023, "FIPS 140-3 mode cannot write this profile (its MAC key comes from PKCS#12's own key derivation, which FIPS 140-3 does not approve): use Modern2026 (PBMAC1), the default in FIPS mode")}
	}
	return nil
}

// validateSharedPaths checks that the items writing one file agree on its format and
// password and profile: the file is encoded once, from all of them.
func validateSharedPaths(sources []Source, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	first := map[string]int{}
	for i, s := range sources {
		j, seen := first[s.Path]
		if !seen {
			first[s.Path] = i
			continue
		}
		if f, g := s.FileFormat(), sources[j].FileFormat(); f != g {
			errs = append(errs, field.Invalid(fldPath.Index(i).Child("format"), f, fmt.Sprintf("item %d writes %q as %s; items sharing a path must agree on its format", j, s.Path, g)))
		}
		if f, g := s.Profile(), sources[j].Profile(); f != g {
			errs = append(errs, field.Invalid(fldPath.Index(i).Child("pkcs12Profile"), f, fmt.Sprintf("item %d writes %q with profile %s; items sharing a path must agree on its profile", j, s.Path, g)))
		}
		if a, b := s.PasswordSecret, sources[j].PasswordSecret; (a == nil) != (b == nil) || (a != nil && *a != *b) {
			errs = append(errs, field.Invalid(fldPath.Index(i).Child("passwordSecret"), describeKeyRef(a), fmt.Sprintf("item %d names %s for %q; items sharing a path must agree on its password", j, describeKeyRef(b), s.Path)))
		}
	}
	return errs
}

func describeKeyRef(r *KeyRef) string {
	if r == nil {
		return "no passwordSecret"
	}
	return fmt.Sprintf("passwordSecret %s/%s", r.Name, r.Key)
}

func (r *KeyRef) validate(fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(r.Name, false) {
		errs = append(errs, field.Invalid(fldPath.Child("name"), r.Name, msg))
	}
	for _, msg := range validation.IsConfigMapKey(r.Key) {
		errs = append(errs, field.Invalid(fldPath.Child("key"), r.Key, msg))
	}
	return errs
}

// ValidatePath checks a source's file path: a path the sidecar can write (see
// ValidateFilePath) and not one of the certificate files.
func ValidatePath(fldPath *field.Path, p string) field.ErrorList {
	if errs := ValidateFilePath(fldPath, p); len(errs) > 0 {
		return errs
	}
	// A directory named like a certificate file would collide with it just the same.
	if ReservedPaths.Has(strings.SplitN(p, "/", 2)[0]) {
		return field.ErrorList{field.Invalid(fldPath, p, fmt.Sprintf("is reserved for the workload certificate (%s)", strings.Join(sets.List(ReservedPaths), ", ")))}
	}
	return nil
}

// The limits of the kubelet's atomic writer, which the sidecar's follows: a path of at
// most 4096 bytes, each element at most 255 (what Linux file systems allow).
const (
	maxPathLength    = 4096
	maxElementLength = 255
)

// ValidateFilePath checks a file path inside the volume by the kubelet's atomic writer
// rules: relative, at most 4096 bytes with elements of at most 255, no NUL byte, no
// ".." element, and no element starting with ".." (the writer keeps its own "..data"
// entries there).
func ValidateFilePath(fldPath *field.Path, p string) field.ErrorList {
	switch {
	case p == "":
		return field.ErrorList{field.Required(fldPath, "the file to write, relative to the volume, such as ca_certificates.pem")}
	case strings.ContainsRune(p, 0):
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain a NUL byte")}
	case path.IsAbs(p):
		return field.ErrorList{field.Invalid(fldPath, p, "must be a relative path")}
	case len(p) > maxPathLength:
		return field.ErrorList{field.TooLong(fldPath, "", maxPathLength)}
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'")}
		}
		if strings.HasPrefix(elem, "..") {
			return field.ErrorList{field.Invalid(fldPath, p, "must not have an element starting with '..'")}
		}
		if elem == "" || elem == "." {
			return field.ErrorList{field.Invalid(fldPath, p, "must not have empty or '.' elements")}
		}
		if len(elem) > maxElementLength {
			return field.ErrorList{field.Invalid(fldPath, p, fmt.Sprintf("has an element of %d bytes; a file or directory name may have at most %d", len(elem), maxElementLength))}
		}
	}
	return nil
}

// FileDirectoryConflict returns a pair of paths of which one would have to be both a
// file and a directory ("a" and "a/b.pem"), or ok false. Paths must be valid.
func FileDirectoryConflict(paths []string) (file, under string, ok bool) {
	files := sets.New(paths...)
	for _, p := range sets.List(files) {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if files.Has(dir) {
				return dir, p, true
			}
		}
	}
	return "", "", false
}

// EncodeSources is a sources list as the trustsync.io/bundles annotation and the
// --sources flag take it; ParseSources reads it back.
func EncodeSources(sources []Source) string {
	if len(sources) == 0 {
		return "[]"
	}
	b, err := json.Marshal(sources)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	return string(b)
}
