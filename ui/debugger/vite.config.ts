// Vite builds the debugger page into lctl/debugger/dist, which the Go
// package embeds with go:embed (so `go build` needs Go alone). Run `make ui`
// after changing anything here and commit the result.
import { defineConfig } from 'vite';

export default defineConfig({
  // Relative asset URLs: the page works wherever it is mounted (lctl debug
  // serves it at /, the tracer may serve it under a prefix).
  base: './',
  build: {
    outDir: '../../lctl/debugger/dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    // The server's Content-Security-Policy allows no inline script or style:
    // never inline assets as data: URLs for scripts, and no module preload
    // polyfill (it is emitted inline by some setups).
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
    target: 'es2022',
  },
  oxc: {
    jsx: { runtime: 'automatic', importSource: 'preact' },
  },
});
