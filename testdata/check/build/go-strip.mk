# Go only: no C flags needed; -s -w is a note, not a violation.
build:
	go build -ldflags="-s -w" -o bin/app ./cmd/app
