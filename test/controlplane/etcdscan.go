package controlplane

// EtcdURL is etcd's client URL: test/keyscan reads every key and value through it, as
// a backup of etcd would hold them.
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL }
