//go:build !unix

package certs_test

import "testing"

func mkfifoAt(t *testing.T, _ string) { t.Skip("no named pipes") }
