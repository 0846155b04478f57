package controlplane

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/trustsync/trustsync/test/fixtures"
)

// AdminConfig returns a client config for a cluster admin (group system:masters).
func (cp *ControlPlane) AdminConfig() *rest.Config {
	cp.adminOnce.Do(func() {
		cp.adminCfg = cp.UserConfig("e2e-admin", "system:masters")
	})
	return rest.CopyConfig(cp.adminCfg)
}

// UserConfig returns a client config that authenticates as user with groups, through
// a client certificate the API server trusts. RBAC grants such a user nothing beyond
// system:authenticated's defaults.
func (cp *ControlPlane) UserConfig(user string, groups ...string) *rest.Config {
	cert := fixtures.MustNew(fixtures.Options{
		CommonName: user, Organization: groups, Leaf: true, Parent: cp.clientCA,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	cfg := cp.anonymousConfig()
	cfg.CertData = cert.CertPEM()
	cfg.KeyData = cert.KeyPEM()
	return cfg
}

// ServiceAccountConfig returns a client config that authenticates as the
// ServiceAccount namespace/name (created if missing) with a token from the
// TokenRequest API, as a pod's projected token would.
func (cp *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	if err := cp.ensureServiceAccount(ctx, client, namespace, name); err != nil {
		return nil, err
	}
	expiry := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := cp.anonymousConfig()
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// PodServiceAccountConfig is a client config with a token of pod's ServiceAccount
// bound to pod, as the kubelet gives a running pod: the API server adds the pod's
// node to the requests it authenticates (userInfo.extra
// authentication.kubernetes.io/node-name).
func (cp *ControlPlane) PodServiceAccountConfig(ctx context.Context, pod *corev1.Pod) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	expiry := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to request a token bound to pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cfg := cp.anonymousConfig()
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// anonymousConfig trusts the API server's CA and carries no credentials.
func (cp *ControlPlane) anonymousConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.servingCA.CertPEM()},
		QPS:             100,
		Burst:           200,
	}
}

// WriteKubeconfig writes cfg as a kubeconfig file, for kubectl, helm and the binaries
// under test.
func WriteKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["e2e"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "e2e"}
	kc.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}
