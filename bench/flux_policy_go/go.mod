module stockade.bench/fluxpolicy

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/fluxcd/pkg/version v0.17.0
)
