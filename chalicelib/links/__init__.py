"""The one-click email links: signing, their keys, the actions and the pages."""
