# The release artifacts (dist/): static linux/amd64 and linux/arm64 binaries
# in .tar.gz archives, Debian packages, OCI images and SHA256SUMS, built reproducibly
# from SOURCE_DATE_EPOCH (default: the commit's time). See release/main.go.
.PHONY: release
release:
	cd release && go run . -out ../dist
