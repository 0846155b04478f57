package registration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's plugin watcher finds the socket, asks what is there, and says whether
// it took it: the agent answers as a CSI plugin with its CSI socket, and its readiness
// follows the kubelet's answer. The socket goes when the agent stops.
func TestServe_AnswersTheKubeletsPluginWatcher(t *testing.T) {
	dir := t.TempDir()
	s := &Server{Driver: "csi.trustsync.io", Endpoint: "/var/lib/kubelet/plugins/csi.trustsync.io/csi.sock", Versions: []string{"1.0.0"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, dir, s) }()
	socket := filepath.Join(dir, "csi.trustsync.io-reg.sock")
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := registerapi.NewRegistrationClient(conn)
	var info *registerapi.PluginInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if info, err = client.GetInfo(ctx, &registerapi.InfoRequest{}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != s.Driver || info.Endpoint != s.Endpoint || len(info.SupportedVersions) != 1 {
		t.Errorf("GetInfo = %+v", info)
	}
	if s.Registered() {
		t.Error("registered before the kubelet said so")
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if !s.Registered() {
		t.Error("not registered after the kubelet said so")
	}
	if _, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "bad version"}); err != nil || s.Registered() {
		t.Errorf("after a refusal: registered %v, %v", s.Registered(), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the agent: %v", err)
	}
}
