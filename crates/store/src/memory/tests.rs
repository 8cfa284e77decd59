use super::*;

fn memories() -> (tempfile::TempDir, Memories) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, Memories::new(store))
}

fn project() -> Scope {
    Scope::Project("/work/app".into())
}

fn ids(found: &Found) -> Vec<i64> {
    found.hits.iter().map(|h| h.memory.id).collect()
}

#[test]
fn a_memory_is_added_read_edited_and_removed_with_its_index_in_step() {
    let (_dir, m) = memories();
    let added = m
        .add(
            &project(),
            "the tests run with cargo nextest",
            &Source::Session("s1".into()),
        )
        .unwrap();
    assert_eq!(added.scope, project());
    assert_eq!(added.source, Source::Session("s1".into()));
    assert!(added.created.ends_with('Z') && added.created == added.updated);
    assert_eq!(m.get(added.id).unwrap(), Some(added.clone()));
    let found = m.search("nextest", &ScopeFilter::All, 10).unwrap();
    assert_eq!(ids(&found), [added.id]);

    let edited = m.edit(added.id, "the tests run with make check").unwrap();
    assert_eq!(edited.source, Source::Human, "an edit is a human's");
    assert!(
        m.search("nextest", &ScopeFilter::All, 10)
            .unwrap()
            .hits
            .is_empty()
    );
    assert_eq!(
        ids(&m.search("make", &ScopeFilter::All, 10).unwrap()),
        [added.id]
    );

    assert_eq!(
        m.remove(added.id).unwrap().text,
        "the tests run with make check"
    );
    assert!(
        m.search("make", &ScopeFilter::All, 10)
            .unwrap()
            .hits
            .is_empty()
    );
    assert_eq!(m.get(added.id).unwrap(), None);
    assert!(matches!(m.remove(added.id), Err(MemoryError::NotFound(_))));
    assert!(matches!(
        m.edit(added.id, "x"),
        Err(MemoryError::NotFound(_))
    ));
    // Ids are never reused.
    let next = m.add(&Scope::User, "again", &Source::Human).unwrap();
    assert!(next.id > added.id);
}

#[test]
fn a_text_over_the_limit_or_empty_is_refused_and_nothing_is_stored() {
    let (_dir, m) = memories();
    let huge = "x".repeat(10 * 1024 * 1024);
    let e = m.add(&Scope::User, &huge, &Source::Human).unwrap_err();
    assert!(matches!(e, MemoryError::TooLong { bytes } if bytes == huge.len()));
    assert!(e.to_string().contains("at most 16384 bytes"), "{e}");
    assert!(e.to_string().contains("nothing was stored"), "{e}");
    for blank in ["", "  \n\t"] {
        assert!(matches!(
            m.add(&Scope::User, blank, &Source::Human),
            Err(MemoryError::Empty)
        ));
    }
    assert_eq!(m.count(&ScopeFilter::All).unwrap(), 0);
    let at_limit = "y".repeat(MAX_TEXT_BYTES);
    let kept = m.add(&Scope::User, &at_limit, &Source::Human).unwrap();
    assert!(matches!(
        m.edit(kept.id, &format!("{at_limit}z")),
        Err(MemoryError::TooLong { .. })
    ));
    assert_eq!(
        m.get(kept.id).unwrap().unwrap().text,
        at_limit,
        "the edit lost nothing"
    );
    // The table holds the same limit against any writer.
    let direct = m.store().write(|tx| {
        tx.execute(
            "INSERT INTO memories (scope, text, source, created, updated) VALUES ('user', ?1, 'human', 'a', 'a')",
            [format!("{at_limit}z")],
        )
    });
    assert!(direct.is_err());
    assert_eq!(m.count(&ScopeFilter::All).unwrap(), 1);
}

#[test]
fn search_ranks_by_bm25_and_keeps_to_the_scopes_asked() {
    let (_dir, m) = memories();
    let other = Scope::Project("/work/other".into());
    let weak = m
        .add(
            &project(),
            "deploys go through the staging cluster first, then production",
            &Source::Human,
        )
        .unwrap();
    let strong = m
        .add(
            &project(),
            "staging: the staging cluster is staging.example",
            &Source::Human,
        )
        .unwrap();
    let user = m
        .add(
            &Scope::User,
            "I prefer staging reviews in the morning",
            &Source::Human,
        )
        .unwrap();
    let elsewhere = m
        .add(&other, "staging lives elsewhere here", &Source::Human)
        .unwrap();

    let all = m.search("staging", &ScopeFilter::All, 10).unwrap();
    assert_eq!(all.hits.len(), 4);
    assert_eq!(all.hits[0].memory.id, strong.id, "most occurrences first");
    assert!(all.hits.windows(2).all(|w| w[0].rank <= w[1].rank));
    assert!(!all.read_as_plain_terms);

    let here = ScopeFilter::Only(vec![project(), Scope::User]);
    let mut got = ids(&m.search("staging", &here, 10).unwrap());
    got.sort_unstable();
    assert_eq!(got, [weak.id, strong.id, user.id]);
    assert_eq!(
        ids(&m
            .search("staging", &ScopeFilter::Only(vec![other]), 10)
            .unwrap()),
        [elsewhere.id]
    );
    assert!(
        m.search("staging", &ScopeFilter::Only(vec![]), 10)
            .unwrap()
            .hits
            .is_empty()
    );
    assert_eq!(
        m.search("staging", &ScopeFilter::All, 1)
            .unwrap()
            .hits
            .len(),
        1
    );
    // FTS5 syntax works: phrases, OR, prefixes.
    assert_eq!(
        ids(&m
            .search("\"staging cluster first\"", &ScopeFilter::All, 10)
            .unwrap()),
        [weak.id]
    );
    assert_eq!(
        m.search("morning OR elsewhere", &ScopeFilter::All, 10)
            .unwrap()
            .hits
            .len(),
        2
    );
    assert_eq!(
        m.search("prod*", &ScopeFilter::All, 10).unwrap().hits.len(),
        1
    );
    assert_eq!(m.count(&here).unwrap(), 3);
    assert_eq!(
        m.list(&ScopeFilter::Only(vec![Scope::User]), 10).unwrap(),
        [user]
    );
}

#[test]
fn a_query_that_is_not_fts_syntax_is_searched_as_plain_words() {
    let (_dir, m) = memories();
    let kept = m
        .add(
            &project(),
            "use \"cargo fmt\" (all) before: a commit AND a push",
            &Source::Human,
        )
        .unwrap();
    for query in [
        "\"cargo fmt",
        "fmt AND",
        "(all",
        "before: commit",
        "commit )",
        "NOT",
        "a*b*(",
    ] {
        let found = m.search(query, &ScopeFilter::All, 10);
        let found = found.unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(found.read_as_plain_terms, "{query}");
        if query != "NOT" && query != "a*b*(" {
            assert_eq!(ids(&found), [kept.id], "{query}");
        }
    }
    for (query, want) in [("", "empty"), ("   ", "empty")] {
        match m.search(query, &ScopeFilter::All, 10) {
            Err(MemoryError::BadQuery(message)) => assert!(message.contains(want), "{message}"),
            other => panic!("{query:?}: {other:?}"),
        }
    }
    let long = "word ".repeat(300);
    assert!(matches!(
        m.search(&long, &ScopeFilter::All, 10),
        Err(MemoryError::BadQuery(_))
    ));
}

#[test]
fn scopes_parse_from_their_wire_names_and_bad_ones_are_explained() {
    assert_eq!("user".parse::<Scope>().unwrap(), Scope::User);
    assert_eq!(
        "project:/a/b".parse::<Scope>().unwrap(),
        Scope::Project("/a/b".into())
    );
    assert_eq!(Scope::Project("/a/b".into()).to_string(), "project:/a/b");
    for bad in ["", "users", "project:", "project:relative", "global"] {
        let e = bad.parse::<Scope>().unwrap_err();
        assert!(
            e.to_string()
                .contains("not `user` or `project:<absolute path>`"),
            "{e}"
        );
    }
    assert_eq!(Source::Session("s9".into()).to_string(), "session:s9");
    assert_eq!(Source::parse("session:s9"), Source::Session("s9".into()));
    assert_eq!(Source::parse("human"), Source::Human);
}

#[test]
fn memories_survive_reopening_and_a_backup_keeps_them_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let m = Memories::new(Store::open(dir.path()).unwrap());
        m.add(&Scope::User, "reopened fact", &Source::Human)
            .unwrap()
            .id
    };
    let m = Memories::new(Store::open(dir.path()).unwrap());
    assert_eq!(
        ids(&m.search("reopened", &ScopeFilter::All, 5).unwrap()),
        [id]
    );
    let copy = dir.path().join("backup.db");
    m.store().backup_to(&copy).unwrap();
    let restored = Memories::new(Store::open_at(&copy).unwrap());
    assert_eq!(
        ids(&restored.search("fact", &ScopeFilter::All, 5).unwrap()),
        [id]
    );
}
