// Package browsertest tests idem's operator's page (idemadmin's HTML,
// served by idem admin) in a real browser, headless Chromium driven by
// chromedp. It is a module of its own so that the library's go.mod does
// not carry a browser driver: run it from this directory,
//
//	go test ./...
//
// It skips when no Chromium is found, and fails instead with
// IDEM_REQUIRE_BROWSER=1, as CI runs it (.ci/run). IDEM_SCREENSHOTS=docs
// writes the README's screenshots.
package browsertest
