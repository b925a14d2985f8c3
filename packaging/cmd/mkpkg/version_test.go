package main

import (
	"os/exec"
	"testing"
)

func TestPackageVersion(t *testing.T) {
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+git4.gabc1234.dirty"},
		{"v1.0.0-rc1", "1.0.0~rc1"},
		{"v1.0.0-rc1-2-gabc1234", "1.0.0~rc1+git2.gabc1234"},
		{"abc1234", "0.0.0~git20261203094512.abc1234"},
		{"abc1234-dirty", "0.0.0~git20261203094512.abc1234+dirty"},
		{"0.0.0~git20261203094512.abc1234.1", "0.0.0~git20261203094512.abc1234.1"},
	} {
		got, err := packageVersion(c.describe, "20261203094512")
		if err != nil || got != c.want {
			t.Errorf("packageVersion(%q) = %q, %v; want %q", c.describe, got, err, c.want)
		}
	}
	if _, err := packageVersion("dev", "20261203094512"); err == nil {
		t.Error("packageVersion(\"dev\") succeeded")
	}
	if _, err := packageVersion("abc1234", ""); err == nil {
		t.Error("an untagged build without its date got a version")
	}
	// A later commit sorts later, and every untagged build before any
	// release, as dpkg compares them.
	if _, err := exec.LookPath("dpkg"); err == nil {
		older, _ := packageVersion("ffff999", "20261203094512")
		newer, _ := packageVersion("0000111", "20261204080000")
		for _, c := range [][3]string{{newer, "gt", older}, {"0.1.0", "gt", newer}, {"0.0.1", "gt", newer}} {
			if err := exec.Command("dpkg", "--compare-versions", c[0], c[1], c[2]).Run(); err != nil {
				t.Errorf("dpkg says %s is not %s %s", c[0], c[1], c[2])
			}
		}
	}
}
