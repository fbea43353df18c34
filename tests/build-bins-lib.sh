# shellcheck shell=bash
# The one body of tests/e2e/build-bins.sh and tests/node/build-bins.sh, sourced by both: each
# tier's script says what it builds and how, this file does the rest the same way for both
# (arguments, finding Go, the SKIP without it, the stamp, the lock, the build into a temporary
# directory and the move into the cache).
#
# The sourcing script sets, then calls `build_bins_main "$@"`:
#   script      its own path (its header is the --help text; its bytes are in the stamp)
#   bin         the output directory (the tier's cache)
#   bins        array: the binaries the build leaves in the directory it is given
#   go_p        go build/install -p
#   log_prefix  the word in front of every log line
# and defines:
#   stamp_extra   prints what else the stamp covers (may print nothing)
#   build_into D  builds every binary of `bins` into directory D with "$go_cmd" and fails if any
#                 build fails (it runs on the left of `||`, where `set -e` does not hold:
#                 chain its commands with &&)
#
# Go is $GO, else `go` on PATH, else $build_bins_go_fallback (default /usr/local/go/bin/go).

build_bins_lib="${BASH_SOURCE[0]}"

build_bins_log() { printf '%s: %s\n' "$log_prefix" "$*" >&2; }

# All of `bins` present and executable in $bin.
build_bins_have_all() {
	local b
	for b in "${bins[@]}"; do [[ -x "$bin/$b" ]] || return 1; done
}

# The sha256 of the Go version, both scripts and the tier's own inputs.
build_bins_stamp() {
	{
		echo "$go_version"
		sha256sum "$script" | cut -d' ' -f1
		sha256sum "$build_bins_lib" | cut -d' ' -f1
		stamp_extra
	} | sha256sum | cut -d' ' -f1
}

build_bins_up_to_date() {
	((!force)) && build_bins_have_all && [[ -f "$bin/.stamp" && "$(cat "$bin/.stamp")" == "$want" ]]
}

build_bins_main() {
	force=0 check=0
	local a
	for a in "$@"; do
		case "$a" in
		--force) force=1 ;;
		--check) check=1 ;;
		-h | --help)
			awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script"
			exit 0
			;;
		*)
			echo "build-bins.sh: unknown argument: $a" >&2
			exit 2
			;;
		esac
	done

	go_cmd="${GO:-}"
	if [[ -z "$go_cmd" ]]; then
		if command -v go >/dev/null 2>&1; then
			go_cmd="$(command -v go)"
		elif [[ -x "${build_bins_go_fallback:-/usr/local/go/bin/go}" ]]; then
			go_cmd="${build_bins_go_fallback:-/usr/local/go/bin/go}"
		fi
	fi
	if [[ -z "$go_cmd" ]]; then
		if build_bins_have_all; then
			build_bins_log "SKIP: go not found: skipping build; using existing binaries in $bin (not checked for staleness)"
		else
			build_bins_log "SKIP: go not found: skipping build; no binaries in $bin"
		fi
		exit 0
	fi

	export GOTOOLCHAIN=local CGO_ENABLED=0
	go_version="$("$go_cmd" env GOVERSION)"
	want="$(build_bins_stamp)"

	if build_bins_up_to_date; then
		build_bins_log "up to date in $bin (stamp ${want:0:12})"
		exit 0
	fi
	if ((check)); then
		build_bins_log "not up to date in $bin"
		exit 1
	fi

	mkdir -p "$bin"
	# One build at a time per output dir (parallel test sessions).
	exec 9>"$bin/.lock"
	if command -v flock >/dev/null 2>&1; then flock 9; fi
	if build_bins_up_to_date; then
		build_bins_log "up to date in $bin (built by another process)"
		exit 0
	fi

	tmp="$(mktemp -d "$bin/.build.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT

	local t0 t1 b
	t0=$(date +%s)
	build_bins_log "building ${bins[*]} with $go_version (-p $go_p) into $bin"
	(build_into "$tmp") || {
		build_bins_log "FAILED after $(($(date +%s) - t0))s"
		exit 1
	}
	t1=$(date +%s)

	rm -f "$bin/.stamp"
	for b in "${bins[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
	echo "$want" >"$bin/.stamp"
	for b in "${bins[@]}"; do build_bins_log "  $(du -h "$bin/$b" | cut -f1)	$b"; done
	build_bins_log "built in $((t1 - t0))s"
}
