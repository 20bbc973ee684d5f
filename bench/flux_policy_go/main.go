// Flux's semver tag selection, timed: fluxcd/pkg/version.ParseVersion plus Masterminds/semver constraints (what
// image-reflector-controller's SemVer policer runs) and a Go regexp tag filter, over the tags read from stdin
// (one per line). Prints JSON: the winners and the best-of-N time per selection. Used by bench/bench_reflector.py.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/fluxcd/pkg/version"
)

func semverLatest(c *semver.Constraints, tags []string) string {
	var best *semver.Version
	bestTag := ""
	for _, t := range tags {
		v, err := version.ParseVersion(t)
		if err != nil || !c.Check(v) {
			continue
		}
		if best == nil || v.GreaterThan(best) {
			best, bestTag = v, t
		}
	}
	return bestTag
}

func main() {
	rangeText, pattern, repeats := os.Args[1], os.Args[2], os.Args[3]
	n, _ := strconv.Atoi(repeats)
	var tags []string
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		tags = append(tags, in.Text())
	}
	c, err := semver.NewConstraint(rangeText)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	re := regexp.MustCompile(pattern)
	var winner, filtered string
	bestSemver, bestFilter := time.Duration(1<<62), time.Duration(1<<62)
	for i := 0; i < n; i++ {
		start := time.Now()
		winner = semverLatest(c, tags)
		if d := time.Since(start); d < bestSemver {
			bestSemver = d
		}
		start = time.Now()
		kept := []string{}
		for _, t := range tags {
			if re.MatchString(t) {
				kept = append(kept, t)
			}
		}
		filtered = semverLatest(c, kept)
		if d := time.Since(start); d < bestFilter {
			bestFilter = d
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"semver_winner": winner, "semver_seconds": bestSemver.Seconds(),
		"filtered_winner": filtered, "filtered_seconds": bestFilter.Seconds(),
	})
}
