/** deploy/*.cfg, imported as text so the compiled binary carries the recipe it demonstrates. */
declare module "*.cfg" {
  const text: string;
  export default text;
}
