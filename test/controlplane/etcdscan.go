package controlplane

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
)

// EtcdValues reads every key and value etcd holds, as a backup of it would, through
// etcd's own JSON gateway (no client library): what a test proves absent from the
// cluster's storage, it proves absent from where the API server keeps it.
func (cp *ControlPlane) EtcdValues() (map[string][]byte, error) {
	// From the lowest key to the end of the keyspace: key and range_end both "\x00".
	body, _ := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte{0}), "range_end": base64.StdEncoding.EncodeToString([]byte{0})})
	resp, err := http.Post(cp.etcdURL+"/v3/kv/range", "application/json", bytes.NewReader(body))
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
