// Package registration registers the agent's CSI driver with the kubelet through the
// kubelet's plugin registration: a socket in the kubelet's plugins_registry directory
// that the kubelet finds, asks who is there (GetInfo: a CSI plugin, its name, where its
// CSI socket is) and tells whether it took it (NotifyRegistrationStatus).
//
// This is what node-driver-registrar does in a container of its own beside most CSI
// drivers. It is a few dozen lines over the kubelet's own API types, and serving it in
// the agent saves every node a second container and image, and lets the agent report
// whether the kubelet accepted it on its readiness endpoint.
package registration

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/trustsync/trustsync/agent/csi"
)

// Server answers the kubelet's plugin watcher for one CSI driver.
type Server struct {
	registerapi.UnimplementedRegistrationServer

	Driver string
	// Endpoint is the driver's CSI socket as the kubelet sees it, on the node.
	Endpoint string
	// Versions are the CSI versions the driver serves.
	Versions []string

	registered atomic.Bool
}

// GetInfo tells the kubelet what the plugin is and where its CSI socket is.
func (s *Server) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: s.Driver, Endpoint: s.Endpoint, SupportedVersions: s.Versions}, nil
}

// NotifyRegistrationStatus hears whether the kubelet took the plugin.
func (s *Server) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.registered.Store(st.PluginRegistered)
	if st.PluginRegistered {
		klog.InfoS("The kubelet registered the CSI driver", "driver", s.Driver, "endpoint", s.Endpoint)
	} else {
		klog.ErrorS(errors.New(st.Error), "The kubelet refused to register the CSI driver; pods asking for its volumes will not start", "driver", s.Driver, "endpoint", s.Endpoint)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// Registered reports whether the kubelet said it took the plugin.
func (s *Server) Registered() bool { return s.registered.Load() }

// SocketName is the registration socket's file name in the kubelet's
// plugins_registry directory, by node-driver-registrar's convention.
func SocketName(driver string) string { return driver + "-reg.sock" }

// Serve serves the registration socket in dir until ctx is done; the socket is
// removed on the way out, which tells the kubelet the plugin is gone.
func Serve(ctx context.Context, dir string, s *Server) error {
	path := filepath.Join(dir, SocketName(s.Driver))
	l, err := csi.Listen(path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, s)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	klog.InfoS("Serving plugin registration for the kubelet", "socket", path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
