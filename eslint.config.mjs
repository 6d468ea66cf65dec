// ESLint over every package's source (npm run lint; test/lint.test.ts runs it with the suite):
// the recommended rules of ESLint and typescript-eslint, type-checked, each package through its
// own tsconfig. Formatting is Prettier's (npm run format), not ESLint's.
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'packages/dashboard/src/api/schema.d.ts'] },
  { files: ['packages/*/src/**/*.{ts,tsx}'], extends: [js.configs.recommended, ...tseslint.configs.recommendedTypeChecked] },
  {
    files: ['packages/*/src/**/*.{ts,tsx}'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
  },
  {
    files: ['packages/*/src/**/*.{ts,tsx}'],
    rules: {
      // The usual convention: a name starting with _ is unused on purpose (a parameter a signature
      // requires, an element skipped), and `const { a: _a, ...rest } = o` leaves a field out.
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true }],
    },
  },
  { files: ['packages/dashboard/src/**/*.{ts,tsx}'], languageOptions: { globals: globals.browser } },
);
