// Vite bundles CSS imports into a stylesheet file.
declare module '*.css';
