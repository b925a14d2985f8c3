package benchutil

import "runtime"

// Env describes where a benchmark ran. It is embedded in every result line
// so each line can be read on its own.
type Env struct {
	Kernel string `json:"kernel"` // uname release, e.g. "6.8.0-45-generic"
	FS     string `json:"fs"`     // file system type of the bench directory
	CPUs   int    `json:"cpus"`
	Go     string `json:"go"`
}

// DetectEnv describes this machine, with FS taken from the file system that
// holds dir. Fields that cannot be determined are set to "unknown".
func DetectEnv(dir string) Env {
	return Env{
		Kernel: kernelRelease(),
		FS:     fsType(dir),
		CPUs:   runtime.NumCPU(),
		Go:     runtime.Version(),
	}
}
