import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

// Built into dist/: index.html (served at / by @rampart/server) and content-hashed files under
// /dashboard/assets/. The server's CSP allows no inline script or style, so nothing is inlined.
export default defineConfig({
  base: '/dashboard/',
  plugins: [preact()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    cssCodeSplit: true,
    rollupOptions: {
      treeshake: {
        // @rampart/protocol is shared with the Node halves: its message schemas (TypeBox, compiled
        // at load) are not needed here, and dropping their module-level calls keeps the bundle small
        // and free of code generated at run time (the CSP has no unsafe-eval).
        moduleSideEffects: (id) => !/[\\/]packages[\\/]protocol[\\/]|@sinclair[\\/]typebox/.test(id),
        manualPureFunctions: ['Type', 'TypeCompiler', 'message', 'nullableText'],
      },
    },
  },
});
