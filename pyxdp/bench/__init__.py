"""`zerolayer bench`: every performance figure zerolayer quotes, each against its floor, side by side in one run."""
