//go:build !linux

package benchutil

import "runtime"

func kernelRelease() string { return runtime.GOOS }

func fsType(string) string { return "unknown" }
