"""The troubleshooting checklist's rules, one module per group (`oom`, `nan`, `slow`); `core.advice.checklist`
runs them."""
