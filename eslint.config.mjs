import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.vscode-test/**', 'out/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-restricted-imports': ['error', { paths: [{ name: 'vscode', message: 'Only src/extension/ may import vscode.' }] }],
    },
  },
  { files: ['src/extension/**'], rules: { 'no-restricted-imports': 'off' } },
  {
    // main.ts runs the CLI when loaded; commands take their contract from args.ts (defineCommand).
    files: ['src/cli/**'],
    ignores: ['src/cli/main.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [{ name: 'vscode', message: 'Only src/extension/ may import vscode.' }],
          patterns: [
            {
              group: ['./main', './main.js', '**/cli/main', '**/cli/main.js'],
              message: 'main.ts runs the CLI on load; import the command contract from ./args.js.',
            },
          ],
        },
      ],
    },
  },
  { files: ['**/*.mjs'], languageOptions: { globals: { process: 'readonly', console: 'readonly' } } },
);
