package main

import "testing"

func TestPackageVersion(t *testing.T) {
	for _, c := range []struct{ describe, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.2.3-dirty", "1.2.3+dirty"},
		{"v1.2.3-4-gabc1234", "1.2.3+git4.gabc1234"},
		{"v1.2.3-4-gabc1234-dirty", "1.2.3+git4.gabc1234.dirty"},
		{"v1.0.0-rc1", "1.0.0~rc1"},
		{"v1.0.0-rc1-2-gabc1234", "1.0.0~rc1+git2.gabc1234"},
		{"abc1234", "0.0.0+git.gabc1234"},
		{"abc1234-dirty", "0.0.0+git.gabc1234.dirty"},
		{"0.0.0+git.gabc1234.1", "0.0.0+git.gabc1234.1"},
	} {
		got, err := packageVersion(c.describe)
		if err != nil || got != c.want {
			t.Errorf("packageVersion(%q) = %q, %v; want %q", c.describe, got, err, c.want)
		}
	}
	if _, err := packageVersion("dev"); err == nil {
		t.Error("packageVersion(\"dev\") succeeded")
	}
}
