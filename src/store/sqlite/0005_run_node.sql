-- The node (engine process) that claimed a run's latest attempt, for the dashboard and the API.
ALTER TABLE runs ADD COLUMN node TEXT;
