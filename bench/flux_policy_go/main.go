// Flux's semver tag selection, timed: fluxcd/pkg/version.ParseVersion plus Masterminds/semver constraints (what
// image-reflector-controller's SemVer policer runs), over the tags read from stdin (one per line), alone and after
// a filterTags step done the way the controller's RegexFilter does it (submatch indexes, the extract template
// expanded into a value -> tag map, selection over the map's values, the winner mapped back to its tag). A cheaper
// filter that only asks MatchString is timed too, for comparison. Prints JSON: the winners and the best-of-N time
// per selection. Used by bench/bench_reflector.py.
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

// filterTags applies pattern/extract like the controller: a later tag wins a value two tags share.
func filterTags(re *regexp.Regexp, extract string, tags []string) map[string]string {
	values := map[string]string{}
	for _, t := range tags {
		idx := re.FindStringSubmatchIndex(t)
		if idx == nil {
			continue
		}
		value := t
		if extract != "" {
			value = string(re.ExpandString(nil, extract, t, idx))
		}
		values[value] = t
	}
	return values
}

func main() {
	rangeText, pattern, extract, repeats := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
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
	var winner, filtered, extracted string
	bestSemver, bestFilter, bestExtract := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
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
		start = time.Now()
		values := filterTags(re, extract, tags)
		items := make([]string, 0, len(values))
		for v := range values {
			items = append(items, v)
		}
		extracted = values[semverLatest(c, items)]
		if d := time.Since(start); d < bestExtract {
			bestExtract = d
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"semver_winner": winner, "semver_seconds": bestSemver.Seconds(),
		"filtered_winner": filtered, "filtered_seconds": bestFilter.Seconds(),
		"filter_tags_winner": extracted, "filter_tags_seconds": bestExtract.Seconds(),
	})
}
