mod router;
