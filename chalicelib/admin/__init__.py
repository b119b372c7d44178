"""The administrator's side: sessions, budgets, tokens, grants, the audit trail and the views."""
