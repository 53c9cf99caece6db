"""The admin's pages for other apps' rows whose saving reaches above their own layer:
policy versions (saved through runs' approval flow), projects and their members
(checked with the sandbox's rules, moving runs' queue on) and MCP servers. Kept in a
package of its own at the top, so the apps below register nothing that points up."""
