// Command mkpkg builds Fibril's .deb and .rpm packages with nfpm's Go
// library. `make package` builds the binaries and completions and runs it:
//
//	mkpkg --version VERSION --build DIR --dist DIR [--arch amd64,arm64] [--format deb,rpm]
//
// DIR/<arch>/fibrild and DIR/<arch>/fibril are the static binaries for
// each architecture; DIR/completions/ holds fibril.bash, _fibril and
// fibril.fish. The rest (unit, config stub, scripts, man pages, copyright,
// changelog) comes from the source tree, found from the working directory
// (the repository root). Packages are written to the dist directory under
// their conventional names.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm"
	"github.com/spf13/pflag"
)

const description = `message broker appliance for edge hardware
Fibril is a message broker for small devices: queues with a per-queue
durability mode (durable: confirmed after fsync; buffered: confirmed once
handed to the operating system, synced soon after), leases with redelivery
and dead-letter queues, a binary client protocol, an admin HTTP API with
Prometheus metrics and a dashboard. This package runs fibrild under
systemd and ships the fibril command-line client.`

func main() {
	flags := pflag.NewFlagSet("mkpkg", pflag.ContinueOnError)
	version := flags.String("version", "", "the build's version, as git describe prints it (required)")
	build := flags.String("build", "build/package", "directory with <arch>/fibrild, <arch>/fibril and completions/")
	dist := flags.String("dist", "dist", "directory the packages are written to")
	date := flags.String("date", "", "the commit's date, YYYYMMDDhhmmss: orders builds without a release tag")
	arches := flags.StringSlice("arch", []string{"amd64", "arm64"}, "architectures (Go names)")
	formats := flags.StringSlice("format", []string{"deb", "rpm"}, "package formats")
	if err := flags.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *version == "" {
		fmt.Fprintln(os.Stderr, "mkpkg: --version is required")
		os.Exit(2)
	}
	pkgVersion, err := packageVersion(*version, *date)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkpkg: %v\n", err)
		os.Exit(2)
	}
	if err := os.MkdirAll(*dist, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "mkpkg: %v\n", err)
		os.Exit(1)
	}
	docs := filepath.Join(*build, "docs")
	if err := writeDocs(docs, pkgVersion); err != nil {
		fmt.Fprintf(os.Stderr, "mkpkg: %v\n", err)
		os.Exit(1)
	}
	for _, arch := range *arches {
		for _, format := range *formats {
			path, err := buildPackage(format, arch, pkgVersion, *build, docs, *dist)
			if err != nil {
				fmt.Fprintf(os.Stderr, "mkpkg: %s %s: %v\n", format, arch, err)
				os.Exit(1)
			}
			fmt.Println(path)
		}
	}
}

var describeRE = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+?)?)(?:-(\d+)-g([0-9a-f]+))?$`)
var hashRE = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
var dateRE = regexp.MustCompile(`^\d{14}$`)

// packageVersion turns git describe's output, and the commit's date
// (YYYYMMDDhhmmss), into a version both dpkg and rpm order correctly: a
// tag v1.2.3 gives 1.2.3 (v1.0.0-rc1 gives 1.0.0~rc1, which sorts before
// 1.0.0); commits after it give 1.2.3+git<n>.g<hash>; a repository without
// tags gives 0.0.0~git<date>.<hash> (dpkg versions must start with a
// digit; the date makes later builds sort later, and "~" before any
// release). "-dirty" becomes "dirty" after a "+" or ".". A version given as
// a package version already (starting with a digit, no "-") is used as
// it is.
func packageVersion(describe, date string) (string, error) {
	base, dirty := strings.CutSuffix(describe, "-dirty")
	var v string
	if m := describeRE.FindStringSubmatch(base); m != nil {
		v = strings.ReplaceAll(m[1], "-", "~")
		if m[2] != "" {
			v += "+git" + m[2] + ".g" + m[3]
		}
	} else if hashRE.MatchString(base) {
		if !dateRE.MatchString(date) {
			return "", fmt.Errorf("a build without a release tag needs the commit's date (--date YYYYMMDDhhmmss), not %q", date)
		}
		v = "0.0.0~git" + date + "." + base
	} else if describe != "" && describe[0] >= '0' && describe[0] <= '9' && !strings.ContainsAny(describe, " -/_") {
		return describe, nil
	} else {
		return "", fmt.Errorf("cannot make a package version of %q", describe)
	}
	if dirty {
		if strings.Contains(v, "+") {
			v += ".dirty"
		} else {
			v += "+dirty"
		}
	}
	return v, nil
}

// buildPackage writes one package and returns its path.
func buildPackage(format, arch, version, build, docs, dist string) (string, error) {
	packager, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:          "fibril",
		Arch:          arch,
		Platform:      "linux",
		Version:       version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    "Fibril developers <fibril-edge@users.noreply.github.com>",
		Description:   description,
		Vendor:        "Fibril",
		Homepage:      "https://github.com/fibril-edge/fibril",
		License:       "Apache-2.0",
		Overridables: nfpm.Overridables{
			Contents: contents(filepath.Join(build, arch), filepath.Join(build, "completions"), docs),
			Scripts: nfpm.Scripts{
				PreInstall:  "packaging/scripts/preinstall.sh",
				PostInstall: "packaging/scripts/postinstall.sh",
				PreRemove:   "packaging/scripts/preremove.sh",
				PostRemove:  "packaging/scripts/postremove.sh",
			},
			RPM: nfpm.RPM{
				Group:   "Applications/Internet",
				Summary: "Fibril message broker appliance for edge hardware",
			},
			Deb: nfpm.Deb{Compression: "xz"},
		},
	})
	if format == "deb" {
		// The deb release is part of the version only when it is not the
		// packager's own first revision.
		info.Release = ""
	}
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", err
	}
	path := filepath.Join(dist, packager.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := packager.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}

// contents lists the package's files. Modes are explicit so the package
// does not depend on the build machine's umask.
func contents(bin, completions, docs string) files.Contents {
	file := func(src, dst string, mode os.FileMode) *files.Content {
		return &files.Content{Source: src, Destination: dst,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode}}
	}
	return files.Contents{
		file(filepath.Join(bin, "fibrild"), "/usr/bin/fibrild", 0o755),
		file(filepath.Join(bin, "fibril"), "/usr/bin/fibril", 0o755),
		file("systemd/fibril.service", "/usr/lib/systemd/system/fibril.service", 0o644),
		// The config is a stub whose keys are all commented out but the
		// data directory: the package never changes it, so upgrades never
		// prompt. Readable by the fibril group, which the preinstall
		// script creates before the files are unpacked.
		{Source: "packaging/fibril.toml", Destination: "/etc/fibril/fibril.toml", Type: files.TypeConfigNoReplace,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "fibril", Mode: 0o640}},
		{Destination: "/etc/fibril", Type: files.TypeDir,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "fibril", Mode: 0o750}},
		file(filepath.Join(completions, "fibril.bash"), "/usr/share/bash-completion/completions/fibril", 0o644),
		file(filepath.Join(completions, "_fibril"), "/usr/share/zsh/vendor-completions/_fibril", 0o644),
		file(filepath.Join(completions, "fibril.fish"), "/usr/share/fish/vendor_completions.d/fibril.fish", 0o644),
		file(filepath.Join(docs, "fibrild.8.gz"), "/usr/share/man/man8/fibrild.8.gz", 0o644),
		file(filepath.Join(docs, "fibril.1.gz"), "/usr/share/man/man1/fibril.1.gz", 0o644),
		file("packaging/copyright", "/usr/share/doc/fibril/copyright", 0o644),
		file(filepath.Join(docs, "changelog.gz"), "/usr/share/doc/fibril/changelog.gz", 0o644),
		{Source: "packaging/lintian-overrides", Destination: "/usr/share/lintian/overrides/fibril", Packager: "deb",
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o644}},
	}
}
