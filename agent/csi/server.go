// Package csi serves the CSI Identity and Node services for the agent's ephemeral
// inline volumes over a unix socket: it checks each request's shape and hands the
// volume to a Volumes, which does the work. There is no Controller service: the
// volumes are the pods' own, created and removed with them.
package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"
)

// Volumes publishes and removes volumes.
type Volumes interface {
	Publish(ctx context.Context, req PublishRequest) error
	Unpublish(ctx context.Context, volumeID, targetPath string) error
}

// PublishRequest is a checked NodePublishVolume: the volume, where the kubelet wants
// it, the volume's attributes, and apart from them the pod's tokens (the kubelet's
// JSON map of audience to token; HasTokens false when it passed none).
type PublishRequest struct {
	VolumeID, TargetPath string
	Attributes           map[string]string
	Tokens               string
	HasTokens            bool
}

// Server is the agent's CSI Identity and Node services.
type Server struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	Driver  string
	Version string
	NodeID  string
	Volumes Volumes
	// Ready reports whether the agent can serve publishes (its watches listed).
	Ready func() bool
}

// GetPluginInfo names the driver.
func (s *Server) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: s.Driver, VendorVersion: s.Version}, nil
}

// GetPluginCapabilities offers no Controller service: volumes are ephemeral and inline.
func (s *Server) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe reports readiness.
func (s *Server) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(s.Ready == nil || s.Ready())}, nil
}

// NodeGetInfo names the node.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.NodeID}, nil
}

// NodeGetCapabilities offers none beyond publishing: no staging, no stats.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// ephemeralAttribute is the kubelet's mark of an inline ephemeral volume.
const ephemeralAttribute = "csi.storage.k8s.io/ephemeral"

// TokensKey holds the pod's ServiceAccount tokens the CSIDriver's tokenRequests ask
// for: JSON, audience to token.
const TokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// NodePublishVolume checks the request and publishes the volume.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if err := checkTarget(req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, err
	}
	if c := req.GetVolumeCapability(); c == nil || c.GetMount() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability must ask for a mounted filesystem: the volume is a directory of files")
	}
	attrs := req.GetVolumeContext()
	if attrs[ephemeralAttribute] != "true" {
		return nil, status.Errorf(codes.InvalidArgument, "%s serves inline ephemeral volumes only (a csi volume in the pod's spec, as the injector writes it), not persistent volumes", s.Driver)
	}
	// With the CSIDriver's serviceAccountTokenInSecrets, the kubelet passes the pod's
	// tokens as a secret, where gRPC loggers know not to look; older kubelets pass
	// them among the attributes. Either way they are kept apart from the attributes.
	publish := PublishRequest{VolumeID: req.GetVolumeId(), TargetPath: req.GetTargetPath(), Attributes: attrs}
	if tokens, ok := attrs[TokensKey]; ok {
		publish.Attributes = maps.Clone(attrs)
		delete(publish.Attributes, TokensKey)
		publish.Tokens, publish.HasTokens = tokens, true
	}
	if tokens, ok := req.GetSecrets()[TokensKey]; ok {
		publish.Tokens, publish.HasTokens = tokens, true
	}
	if err := s.Volumes.Publish(ctx, publish); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume removes the volume.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := checkTarget(req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, err
	}
	if err := s.Volumes.Unpublish(ctx, req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, err
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func checkTarget(volumeID, target string) error {
	switch {
	case volumeID == "":
		return status.Error(codes.InvalidArgument, "volume_id is required")
	case target == "" || !filepath.IsAbs(target) || filepath.Clean(target) != target:
		return status.Errorf(codes.InvalidArgument, "target_path %q must be a clean absolute path", target)
	}
	return nil
}

// Serve serves s on the unix socket endpoint ("unix:///csi/csi.sock" or a path) until
// ctx is done, then stops gracefully. A socket left by a previous agent is replaced.
func Serve(ctx context.Context, endpoint string, s *Server) error {
	path, err := SocketPath(endpoint)
	if err != nil {
		return err
	}
	l, err := Listen(path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, s)
	csi.RegisterNodeServer(srv, s)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	klog.InfoS("Serving CSI", "driver", s.Driver, "socket", path)
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// SocketPath is the file of a unix endpoint.
func SocketPath(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q must be a unix socket (unix:///path/csi.sock)", endpoint)
	}
	if !ok {
		path = endpoint
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q must be an absolute path", endpoint)
	}
	return path, nil
}

// Listen listens on the unix socket path, replacing a stale one.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cannot remove the stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", path, err)
	}
	return l, nil
}

// logCalls logs every call at -v=4 and every failure at the default level.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if err != nil {
		klog.InfoS("CSI call failed", "method", info.FullMethod, "code", status.Code(err), "err", status.Convert(err).Message(), "took", time.Since(start))
	} else {
		klog.V(4).InfoS("CSI call", "method", info.FullMethod, "took", time.Since(start))
	}
	return resp, err
}
