package lctl

import (
	"fmt"
	"strconv"
	"strings"
)

// KnownMinorVersions are the 4.x versions this package knows it reads
// completely: 4.0 (the spec) and 4.1 (what the reference implementation
// writes; its files have the 4.0 shape). A file of another 4.x version is
// read the same way, with a warning, because a minor version only adds.
var KnownMinorVersions = []string{"4.0", "4.1"}

// VersionError is a chain file's lctl version that cannot be read: another
// major version, or something that is not a version at all.
type VersionError struct {
	// Version is the version as the file wrote it.
	Version string
	// Major is the major version (-1 when it does not parse).
	Major int
}

func (e *VersionError) Error() string {
	switch {
	case e.Major < 0:
		return fmt.Sprintf("lctl version %q is not a version number (want 4.x, e.g. \"4.0\")", e.Version)
	case e.Major < 4:
		return fmt.Sprintf("lctl version %q is LCTL v%d, which this lctl does not read as events; convert it first: lctl convert --from v%d --to v4 FILE OUT", e.Version, e.Major, e.Major)
	}
	return fmt.Sprintf("lctl version %q has major version %d, which this lctl does not know (it reads 4.x): a new major version may change the format incompatibly, so the file is not read", e.Version, e.Major)
}

// CheckVersion decides whether a chain file's lctl version can be read.
// Any 4.x is read: "4" and "4.0" are returned as "4.0", other 4.x as
// written; warning is set when the minor version is not one of
// KnownMinorVersions. Another major version, or text that is not a version,
// is a *VersionError. Every decoder calls this with the version it found.
func CheckVersion(v string) (version, warning string, err error) {
	v = strings.TrimSpace(v)
	major, minor, ok := parseVersion(v)
	if !ok {
		return "", "", &VersionError{Version: v, Major: -1}
	}
	if major != 4 {
		return "", "", &VersionError{Version: v, Major: major}
	}
	if minor < 0 {
		v = Version
	}
	for _, k := range KnownMinorVersions {
		if v == k {
			return v, "", nil
		}
	}
	return v, fmt.Sprintf("lctl version %q is newer than the versions this lctl knows (%s); read as 4.0: fields it does not know are kept but not interpreted",
		v, strings.Join(KnownMinorVersions, ", ")), nil
}

// parseVersion reads "MAJOR", "MAJOR.MINOR" or "MAJOR.MINOR.PATCH"; minor
// is -1 when absent.
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.Split(v, ".")
	if len(parts) == 0 || len(parts) > 3 {
		return 0, 0, false
	}
	nums := make([]int, len(parts))
	for i, p := range parts {
		if p == "" || len(p) > 6 || strings.TrimLeft(p, "0123456789") != "" {
			return 0, 0, false
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return 0, 0, false
		}
		nums[i] = n
	}
	minor = -1
	if len(nums) > 1 {
		minor = nums[1]
	}
	return nums[0], minor, true
}
