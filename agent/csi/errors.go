package csi

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The answers a publish may give the kubelet, as CSI's gRPC codes, which only this
// package speaks: the volume manager says what went wrong in these words, and the
// kubelet shows the message on the pod and retries as the code says.

// InvalidArgument: the request itself cannot be served (attributes, tokens).
func InvalidArgument(format string, args ...any) error {
	return refuse(codes.InvalidArgument, format, args...)
}

// AlreadyExists: the volume is published elsewhere or for another pod.
func AlreadyExists(format string, args ...any) error {
	return refuse(codes.AlreadyExists, format, args...)
}

// FailedPrecondition: the pod is not what the request says (yet).
func FailedPrecondition(format string, args ...any) error {
	return refuse(codes.FailedPrecondition, format, args...)
}

// PermissionDenied: the request is for what this agent may not serve.
func PermissionDenied(format string, args ...any) error {
	return refuse(codes.PermissionDenied, format, args...)
}

// Unavailable: the sources or the certificate are not there yet; the kubelet retries.
func Unavailable(format string, args ...any) error { return refuse(codes.Unavailable, format, args...) }

// Internal: the node failed the agent (its store, a mount).
func Internal(format string, args ...any) error { return refuse(codes.Internal, format, args...) }

func refuse(code codes.Code, format string, args ...any) error {
	return status.Error(code, fmt.Sprintf(format, args...))
}
