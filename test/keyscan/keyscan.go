// Package keyscan looks for private keys everywhere a cluster keeps data: every
// Secret's and ConfigMap's values as the API serves them, and every etcd key as
// stored, the way a backup of etcd would hold them. A test proves a CA's key absent by
// comparing public keys, never by trusting names.
package keyscan

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// EtcdValues reads every key and value the etcd at url (its client URL) holds, through
// etcd's own JSON gateway (no client library).
func EtcdValues(url string) (map[string][]byte, error) {
	// From the lowest key to the end of the keyspace: key and range_end both "\x00".
	body, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte{0}), "range_end": base64.StdEncoding.EncodeToString([]byte{0})})
	resp, err := http.Post(url+"/v3/kv/range", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("etcd range: %s", resp.Status)
	}
	var out struct {
		KVs []struct {
			Key   []byte `json:"key"`
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("etcd range: %w", err)
	}
	values := make(map[string][]byte, len(out.KVs))
	for _, kv := range out.KVs {
		values[string(kv.Key)] = kv.Value
	}
	return values, nil
}

// Storage is every place a key could be left in the cluster, by a name for it: each
// Secret's values and annotations, each ConfigMap's values, and each of etcd's keys.
// An empty etcd is an error: a scan of nothing proves nothing.
func Storage(ctx context.Context, client kubernetes.Interface, etcdURL string) (map[string][]byte, error) {
	out := map[string][]byte{}
	secrets, err := client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			out["Secret "+s.Namespace+"/"+s.Name+" "+k] = v
		}
		for k, v := range s.Annotations {
			out["Secret "+s.Namespace+"/"+s.Name+" annotation "+k] = []byte(v)
		}
	}
	cms, err := client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range cms.Items {
		for k, v := range c.Data {
			out["ConfigMap "+c.Namespace+"/"+c.Name+" "+k] = []byte(v)
		}
	}
	etcd, err := EtcdValues(etcdURL)
	if err != nil {
		return nil, err
	}
	if len(etcd) == 0 {
		return nil, fmt.Errorf("etcd at %s returned no keys: the scan would prove nothing", etcdURL)
	}
	for k, v := range etcd {
		out["etcd "+k] = v
	}
	return out, nil
}

// Holding names the places in storage holding the private key of any of cas, each
// with the CA's subject, in order.
func Holding(storage map[string][]byte, cas []*x509.Certificate) []string {
	var found []string
	for place, data := range storage {
		for _, pub := range PrivateKeysIn(data) {
			for _, ca := range cas {
				if EqualKeys(pub, ca.PublicKey) {
					found = append(found, fmt.Sprintf("%s holds the private key of CA %q", place, ca.Subject))
				}
			}
		}
	}
	sort.Strings(found)
	return found
}

// PrivateKeysIn finds every PEM block in data (wherever it starts, whatever its type
// says) that parses as a private key, and returns their public keys.
func PrivateKeysIn(data []byte) []crypto.PublicKey {
	var out []crypto.PublicKey
	for i := bytes.Index(data, []byte("-----BEGIN ")); i >= 0; {
		block, rest := pem.Decode(data[i:])
		if block != nil {
			if pub := privateKeyPublic(block.Bytes); pub != nil {
				out = append(out, pub)
			}
			data = rest
		} else {
			data = data[i+1:]
		}
		i = bytes.Index(data, []byte("-----BEGIN "))
	}
	return out
}

// privateKeyPublic is the public key of der if der is a private key in any of the
// encodings Go reads (PKCS#8, SEC 1, PKCS#1), else nil.
func privateKeyPublic(der []byte) crypto.PublicKey {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		return k.(crypto.Signer).Public()
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k.Public()
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k.Public()
	}
	return nil
}

// EqualKeys says whether a and b are the same public key.
func EqualKeys(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}
